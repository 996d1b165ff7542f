// What a process joining a running elastic job must agree with it on before it is taken in:
// the options that define the training (the model, the steps and the batch, the optimizer and
// its schedule, the seed, and what every rank does together: validation, checkpoints, the
// mirror). A process a grow started runs the job's own command line; one launched separately
// (--join, run/join_connect.hpp) is given its options by a person, and a difference would make
// the move fail or the run diverge. So the job's rank 0 sends its terms while the joiners are
// being connected, before anything moves; a joiner whose terms differ names the option, and
// the job goes on without the joiners (run/joiner_start.hpp). A plain value; no MPI here.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

#include "weft/core/error.hpp"
#include "weft/nn/gpt_config.hpp"
#include "weft/nn/mlp_config.hpp"
#include "weft/run/settings.hpp"

namespace weft::run {

struct join_terms {
    // One option: its name as on the command line and its value, whole, real or text.
    struct term {
        std::array<char, 24> option{};
        std::int64_t whole = 0;
        double real = 0;
        std::array<char, 128> text{};
        std::uint8_t kind = 0;  // 0: whole, 1: real, 2: text

        [[nodiscard]] std::string value() const {
            if (kind == 0) return std::to_string(whole);
            if (kind == 1) {
                char buffer[32];
                std::snprintf(buffer, sizeof buffer, "%.9g", real);
                return buffer;
            }
            return text.data();
        }
        [[nodiscard]] bool same_value(const term& other) const {
            return kind == other.kind && whole == other.whole && real == other.real && text == other.text;
        }
    };

    static constexpr std::size_t capacity = 32;
    std::array<term, capacity> terms{};
    std::int32_t count = 0;

    void add(std::string_view option, std::int64_t value) { push(option).whole = value; }
    void add_real(std::string_view option, double value) {
        term& t = push(option);
        t.real = value;
        t.kind = 1;
    }
    void add_text(std::string_view option, std::string_view value) {
        term& t = push(option);
        // Longer values are compared by their first 127 characters.
        std::copy_n(value.begin(), std::min(value.size(), t.text.size() - 1), t.text.begin());
        t.kind = 2;
    }

    // Empty when `mine` (a joiner's) agrees with these (the job's); otherwise what differs:
    // "--steps 40 (the running job's: 300)".
    [[nodiscard]] std::string difference(const join_terms& mine) const {
        if (mine.count != count) return "the options compared (a different program or version of weft)";
        for (std::int32_t i = 0; i < count; ++i) {
            const term& theirs = terms[static_cast<std::size_t>(i)];
            const term& own = mine.terms[static_cast<std::size_t>(i)];
            if (theirs.option != own.option) return "the options compared (a different program or version of weft)";
            if (!theirs.same_value(own))
                return std::string(own.option.data()) + " " + own.value() + " (the running job's: " + theirs.value() +
                       ")";
        }
        return {};
    }

private:
    term& push(std::string_view option) {
        require(count < static_cast<std::int32_t>(capacity), "join terms", count,
                "must be fewer than " + std::to_string(capacity));
        term& t = terms[static_cast<std::size_t>(count++)];
        std::copy_n(option.begin(), std::min(option.size(), t.option.size() - 1), t.option.begin());
        return t;
    }
};

// Sent as bytes (run/joiner_start.hpp's join_vote).
static_assert(std::is_trivially_copyable_v<join_terms>);

// The model's terms, for the models train_gpt and train_mlp run (their command-line names).
inline void add_model_terms(join_terms& terms, const nn::gpt_config& model) {
    terms.add("--layers", model.num_layers);
    terms.add("--d-model", model.d_model);
    terms.add("--heads", model.num_heads);
    terms.add("--vocab", model.vocab_size);
    terms.add("--seq-len", model.seq_len);
}
inline void add_model_terms(join_terms& terms, const nn::mlp_config& model) {
    terms.add("--input-dim", model.input_dim);
    terms.add("--hidden", model.hidden_dim);
    terms.add("--blocks", model.num_blocks);
    terms.add("--classes", model.num_classes);
}

// The run's terms: its settings and, where add_model_terms knows the model, the model's.
template <class ModelConfig>
[[nodiscard]] join_terms make_join_terms(const settings& s, const ModelConfig& model) {
    join_terms terms;
    if constexpr (requires { add_model_terms(terms, model); }) add_model_terms(terms, model);
    terms.add("--steps", s.steps);
    terms.add("--batch", s.batch);
    terms.add("--seed", static_cast<std::int64_t>(s.seed));
    terms.add_text("--optimizer", s.optimizer);
    terms.add_real("--lr", s.lr);
    terms.add_real("--weight-decay", s.weight_decay);
    terms.add_real("--grad-clip", s.grad_clip);
    terms.add("--warmup-steps", s.warmup_steps);
    terms.add_real("--min-lr", s.min_lr);
    terms.add("--decay-steps", s.decay_steps);
    terms.add("--skip-nonfinite", s.skip_nonfinite);
    terms.add("--val-every", s.val_every);
    terms.add("--val-batches", s.val_batches);
    terms.add("--checkpoint-every", s.checkpoint_every);
    // Every rank writes its part of a checkpoint there, and validates with the others.
    terms.add_text("--checkpoint-dir", s.checkpoint_dir);
    terms.add_text("--val-data", s.val_data.empty() ? "(none)" : "(given)");
    terms.add("--mirror-every", s.mirror_every);
    return terms;
}

}  // namespace weft::run
