// One pipeline stage of GPT-2: the units [first, last) (0 = embedding, 1..L = blocks,
// L+1 = head) computing on a backend object with tensors held in flat buffers under Hugging
// Face names (nn::flat_parameters), forward, and backward split into an input half (I) and a
// weight half (W).
//
// The stage either owns its tensors (drawn at construction) or borrows them: the engine's
// training state holds every stage's tensors as one value, and a stage built over them
// computes with them without owning them, so the state can be saved, moved to another
// layout and handed to a new stage.
//
// Tied weights: the LM head is wte^T. A stage holding both unit 0 and unit L+1 registers
// "wte.weight" once and adds both contributions to its gradient. A stage holding only one
// of them registers its own "wte.weight", initialized identically (by name); the engine
// must sum the gradients of same-named tensors across stages (and ranks) before the
// optimizer step, and the copies then stay equal because they take the same update.
//
// Activations between stages are [rows * seq_len, d_model] row-major (token-major).
// Every micro-batch has exactly config.seq_len tokens per sequence, which is how a
// non-first stage splits its input rows into sequences for attention.
//
// Tensor parallelism (Megatron, without sequence parallelism): with a tp group of size n,
// each of n ranks builds the same stage over the same units holding its slice of every
// split tensor (attention by heads, the MLP by hidden columns, wte by vocabulary rows; see
// the layers), and activations between blocks and stages are replicated on all n ranks.
// The last stage's output is this rank's vocabulary columns of the logits, which
// vocab_parallel_cross_entropy takes. The registry keeps global shapes and the split of
// each tensor, so checkpoints and layout switches see the unsplit model.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/nn/embedding.hpp"
#include "weft/nn/final_gradients.hpp"
#include "weft/nn/layer_residency.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/nn/gpt_config.hpp"
#include "weft/nn/gpt_init.hpp"
#include "weft/nn/lm_head.hpp"
#include "weft/nn/partition.hpp"
#include "weft/nn/stage_checks.hpp"
#include "weft/nn/tensor_parallel.hpp"
#include "weft/nn/token_view.hpp"
#include "weft/nn/transformer_block.hpp"

namespace weft::nn {

template <compute_backend Backend>
class gpt_stage {
public:
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;

    // Everything backward needs for one micro-batch. Filled by forward, trimmed by
    // backward_input to what backward_weight needs, emptied by backward_weight.
    struct stash {
        enum class phase { empty, forwarded, input_done };
        phase state = phase::empty;
        int rows = 0;  // activation rows = sequences * seq_len
        typename embedding<Backend>::saved embed;
        std::vector<typename transformer_block<Backend>::saved> blocks;
        typename lm_head<Backend>::saved head;

        [[nodiscard]] bool empty() const { return state == phase::empty; }
        // Bytes of activations held; what the schedules' peak-memory figures count.
        [[nodiscard]] std::size_t bytes() const {
            std::size_t n = embed.tokens.size() * sizeof(std::int32_t);
            auto add = [&n](const matrix& m) { n += std::size_t(m.size()) * sizeof(typename matrix::value_type); };
            add(embed.d_out);
            for (const auto& b : blocks) b.for_each_matrix(add);
            for (const matrix* m : {&head.x, &head.mean, &head.rstd, &head.normed, &head.d_out, &head.d_normed})
                add(*m);
            return n;
        }
    };

    // Owns its tensors, drawn from config.seed. `tp`: this rank's tensor-parallel group
    // (default: none). Every element is drawn by its global index, so the tp ranks' slices
    // together equal the unsplit stage's tensors. `backend` and the communicator behind `tp`
    // must outlive the stage.
    gpt_stage(Backend& backend, const gpt_config& config, unit_range units, tp_group<scalar> tp = {})
        : gpt_stage(backend, config, units, std::make_unique<flat_parameters<scalar>>(initial_tensors(
                                                 config, units, tp.rank, tp.size)),
                    nullptr, tp) {}

    // Computes with `tensors`, which it does not own (they must outlive the stage); their
    // registry must be this stage's layout on this tp rank. Nothing is drawn or overwritten.
    gpt_stage(Backend& backend, const gpt_config& config, unit_range units, flat_parameters<scalar>& tensors,
              tp_group<scalar> tp = {})
        : gpt_stage(backend, config, units, nullptr, &tensors, std::move(tp)) {}

    // Every parameter read is inside a layers_in_use scope (nn/layer_residency.hpp).
    static constexpr bool names_layer_reads = true;

    gpt_stage(const gpt_stage&) = delete;
    gpt_stage& operator=(const gpt_stage&) = delete;
    gpt_stage(gpt_stage&&) noexcept = default;
    gpt_stage& operator=(gpt_stage&&) noexcept = default;
    ~gpt_stage() = default;

    // The registry (names, global shapes, splits, flat offsets) a stage over `units` has on
    // tp rank `tp_rank` of `tp_size`, without its weights: what the CUDA trainer and
    // checkpoint tools take when drawing the initial weights (seconds for GPT-2 124M) is not
    // needed. Built by the constructor's own code.
    [[nodiscard]] static parameter_registry layout(const gpt_config& config, unit_range units, int tp_rank = 0,
                                                   int tp_size = 1) {
        parameter_registry registry;
        // Building the layers does not communicate: rank and size are all it needs.
        const auto tp = tp_group<scalar>::without_communication(tp_rank, tp_size);
        static_cast<void>(build_layers(registry, config, units, tp));
        return registry;
    }

    // The tensors a stage over `units` starts training from on tp rank `tp_rank` of
    // `tp_size`: the layout, with weights drawn from config.seed and zero gradients.
    [[nodiscard]] static flat_parameters<scalar> initial_tensors(const gpt_config& config, unit_range units,
                                                                 int tp_rank = 0, int tp_size = 1) {
        flat_parameters<scalar> tensors(layout(config, units, tp_rank, tp_size));
        gpt_initialize(tensors.registry(), tensors.parameters(), config.seed, config.num_layers);
        return tensors;
    }

    [[nodiscard]] Backend& backend() const { return *backend_; }
    [[nodiscard]] const gpt_config& config() const { return config_; }
    [[nodiscard]] unit_range units() const { return units_; }
    [[nodiscard]] bool is_first() const { return units_.first == 0; }
    [[nodiscard]] bool is_last() const { return units_.last == config_.num_units(); }
    // Width of the activation rows a non-first stage takes (the first takes tokens).
    [[nodiscard]] int input_width() const { return config_.d_model; }
    // The last stage gives this tp rank's vocabulary columns of the logits (all of them
    // without tensor parallelism); the others give d_model-wide activations.
    [[nodiscard]] int output_width() const { return is_last() ? vocab_rows().size() : config_.d_model; }
    // The tensor-parallel group this stage computes with (size 1: none).
    [[nodiscard]] const tp_group<scalar>& tp() const { return tp_; }
    // The vocabulary rows of wte (columns of the logits) this tp rank holds:
    // split_range(vocab_size, tp rank, tp size).
    [[nodiscard]] index_range vocab_rows() const { return split_range(config_.vocab_size, tp_.rank, tp_.size); }

    // First stage only. Returns the stage output ([rows * seq_len, output_width()],
    // the logits for a stage that is also last) and fills `s`, which must be empty.
    [[nodiscard]] matrix forward(const token_view& tokens, stash& s) const {
        require(is_first(), "forward(tokens): stage units",
                "[" + std::to_string(units_.first) + ", " + std::to_string(units_.last) + ")",
                "only the first stage (holding unit 0) takes tokens; pass activations instead");
        check_stash_empty(s);
        require(tokens.rows >= 1, "forward: tokens.rows", tokens.rows, "must be at least 1");
        require(tokens.seq_len == config_.seq_len, "forward: tokens.seq_len", tokens.seq_len,
                "must equal gpt_config.seq_len = " + std::to_string(config_.seq_len) +
                    " (every micro-batch uses full-length sequences)");
        require(tokens.tokens.size() == std::size_t(tokens.rows) * std::size_t(tokens.seq_len),
                "forward: tokens.tokens.size()", tokens.tokens.size(),
                "must equal rows * seq_len = " + std::to_string(std::size_t(tokens.rows) * std::size_t(tokens.seq_len)));
        for (std::size_t n = 0; n < tokens.tokens.size(); ++n)
            if (tokens.tokens[n] < 0 || tokens.tokens[n] >= config_.vocab_size)
                throw invalid_argument("forward: tokens.tokens[" + std::to_string(n) + "]", tokens.tokens[n],
                                       "must be a token id in [0, vocab_size = " +
                                           std::to_string(config_.vocab_size) + ")");
        begin(s, tokens.rows * tokens.seq_len);
        matrix embedded = reading_forward(0, [&] { return layers_.embed.forward(*backend_, parameters(), tokens.tokens, s.embed); });
        return run_forward(std::move(embedded), s);
    }

    // Non-first stages. x is [rows * seq_len, d_model].
    [[nodiscard]] matrix forward(const matrix& x, stash& s) const {
        require(!is_first(), "forward(matrix): stage units",
                "[" + std::to_string(units_.first) + ", " + std::to_string(units_.last) + ")",
                "the first stage (holding unit 0) takes tokens (a token_view), not activations");
        check_stash_empty(s);
        require(backend_->cols(x) == input_width(), "forward: x.cols()", backend_->cols(x),
                "must equal d_model = " + std::to_string(input_width()));
        require(backend_->rows(x) >= 1 && backend_->rows(x) % config_.seq_len == 0, "forward: x.rows()",
                backend_->rows(x),
                "must be a positive multiple of gpt_config.seq_len = " + std::to_string(config_.seq_len) +
                    " (rows * seq_len tokens, whole sequences)");
        begin(s, backend_->rows(x));
        return run_forward(x, s);
    }

    // dy is the gradient of the stage output (last stage: dlogits from cross_entropy), taken
    // by value: it becomes the first layer's saved gradient, so pass an rvalue to avoid a copy.
    // Returns the gradient of the stage input; the first stage returns an empty (0 x 0)
    // matrix, since token ids have no gradient.
    [[nodiscard]] matrix backward_input(matrix dy, stash& s) const {
        check_backward_input(dy, s);
        const auto p = parameters();
        matrix d = std::move(dy);
        if (is_last())
            d = reading_backward(head_read(), [&] { return layers_.head.backward_input(*backend_, p, std::move(d), s.head); });
        for (std::size_t i = layers_.blocks.size(); i-- > 0;)
            d = reading_backward(block_read(i), [&] {
                return layers_.blocks[i].backward_input(*backend_, p, std::move(d), s.blocks[i]);
            });
        if (is_first()) {
            layers_.embed.backward_input(*backend_, std::move(d), s.embed);
            d = matrix();
        }
        s.state = stash::phase::input_done;
        return d;
    }

    // Accumulates (+=) this micro-batch's weight gradients into gradients() and
    // releases `s` so it can take the next forward. `on_final(range)` is called for each
    // layer's gradient range as soon as this call adds nothing more to it
    // (nn/final_gradients.hpp).
    template <class OnFinal = ignore_final_gradients>
    void backward_weight(stash& s, OnFinal&& on_final = {}) {
        require(s.state == stash::phase::input_done, "backward_weight: stash",
                s.empty() ? "empty" : "not past backward_input",
                "must have run backward_input for this micro-batch first");
        const auto g = gradients();
        // The head adds to wte too when the embedding is on this stage: its range waits for it.
        const bool embedding_waits = is_first() && is_last();
        if (is_first()) {
            layers_.embed.backward_weight(*backend_, g, s.embed);
            if (!embedding_waits) on_final(layers_.embed_range);
        }
        for (std::size_t i = 0; i < layers_.blocks.size(); ++i) {
            layers_.blocks[i].backward_weight(*backend_, g, s.blocks[i]);
            on_final(layers_.block_ranges[i]);
        }
        if (is_last()) {
            layers_.head.backward_weight(*backend_, g, s.head);
            on_final(layers_.head_range);
            if (embedding_waits) on_final(layers_.embed_range);
        }
        s = stash{};
    }

    // The full backward (B), layer by layer from the last: each layer's input half, then its
    // weight half, so that a layer's gradients are final while the layers before it still
    // compute (on the step's last micro-batch their reduction overlaps the rest of the
    // backward). Every element is computed as backward_input then backward_weight computes
    // it: the layers' halves are independent, and with both of wte's users on this stage the
    // head's weight half waits for the embedding's, so that wte's two terms add in the same
    // order. `on_final` as backward_weight's.
    template <class OnFinal = ignore_final_gradients>
    [[nodiscard]] matrix backward(matrix dy, stash& s, OnFinal&& on_final = {}) {
        check_backward_input(dy, s);
        const auto p = parameters();
        const auto g = gradients();
        const bool head_waits = is_first() && is_last();
        matrix d = std::move(dy);
        if (is_last()) {
            d = reading_backward(head_read(), [&] { return layers_.head.backward_input(*backend_, p, std::move(d), s.head); });
            if (!head_waits) {
                layers_.head.backward_weight(*backend_, g, s.head);
                on_final(layers_.head_range);
            }
        }
        for (std::size_t i = layers_.blocks.size(); i-- > 0;) {
            d = reading_backward(block_read(i), [&] {
                return layers_.blocks[i].backward_input(*backend_, p, std::move(d), s.blocks[i]);
            });
            layers_.blocks[i].backward_weight(*backend_, g, s.blocks[i]);
            on_final(layers_.block_ranges[i]);
        }
        if (is_first()) {
            layers_.embed.backward_input(*backend_, std::move(d), s.embed);
            d = matrix();
            layers_.embed.backward_weight(*backend_, g, s.embed);
            if (head_waits) {
                layers_.head.backward_weight(*backend_, g, s.head);
                on_final(layers_.head_range);
            }
            on_final(layers_.embed_range);
        }
        s = stash{};
        return d;
    }

    // Selective recompute (train/recompute.hpp): drops from a forward's stash what the backward
    // computes again, the attention probabilities of every block.
    void drop_recomputable(stash& s) const {
        for (auto& block : s.blocks) transformer_block<Backend>::drop_recomputable(block);
    }

    // The tensors the stage computes with (owned or borrowed).
    [[nodiscard]] flat_parameters<scalar>& tensors() { return *tensors_; }
    [[nodiscard]] const flat_parameters<scalar>& tensors() const { return *tensors_; }
    [[nodiscard]] std::span<scalar> parameters() { return tensors_->parameters(); }
    [[nodiscard]] std::span<const scalar> parameters() const { return tensors_->parameters(); }
    [[nodiscard]] std::span<scalar> gradients() { return tensors_->gradients(); }
    [[nodiscard]] std::span<const scalar> gradients() const { return tensors_->gradients(); }
    void zero_gradients() { tensors_->zero_gradients(); }
    [[nodiscard]] const parameter_registry& registry() const { return tensors_->registry(); }

private:
    gpt_stage(Backend& backend, const gpt_config& config, unit_range units,
              std::unique_ptr<flat_parameters<scalar>> owned, flat_parameters<scalar>* borrowed, tp_group<scalar> tp)
        : backend_(&backend),
          config_(config),
          units_(units),
          tp_(std::move(tp)),
          owned_(std::move(owned)),
          tensors_(owned_ ? owned_.get() : borrowed) {
        parameter_registry registry;
        layers_ = build_layers(registry, config, units, tp_);
        reads_ = layer_reads();
        require(registry == tensors_->registry(), "gpt_stage tensors", "a different layout",
                "must have this stage's registry (units [" + std::to_string(units.first) + ", " +
                    std::to_string(units.last) + "), tp rank " + std::to_string(tp_.rank) + " of " +
                    std::to_string(tp_.size) + "): build them with gpt_stage::initial_tensors or ::layout");
    }

    void check_backward_input(const matrix& dy, const stash& s) const {
        nn::check_backward_input(s, backend_->rows(dy), backend_->cols(dy), output_width());
    }
    void begin(stash& s, int rows) const {
        s.rows = rows;
        s.blocks.assign(layers_.blocks.size(), {});
    }
    // Consecutive blocks hand each other their output as two terms, which the next LayerNorm
    // adds in its own kernel (the next block's ln_1, the head's ln_f); what leaves the stage
    // for the next one is their sum.
    matrix run_forward(matrix y, stash& s) const {
        y = forward_layers(std::move(y), s);
        s.state = stash::phase::forwarded;
        return y;
    }
    matrix forward_layers(matrix y, stash& s) const {
        const auto p = parameters();
        if (layers_.blocks.empty()) {
            if (!is_last()) return y;
            return reading_forward(head_read(), [&] { return layers_.head.forward(*backend_, p, std::move(y), s.head); });
        }
        auto terms = reading_forward(block_read(0), [&] {
            return layers_.blocks[0].forward_terms(*backend_, p, std::move(y), s.blocks[0]);
        });
        for (std::size_t i = 1; i < layers_.blocks.size(); ++i)
            terms = reading_forward(block_read(i),
                                    [&] { return layers_.blocks[i].forward_terms(*backend_, p, terms, s.blocks[i]); });
        if (is_last())
            return reading_forward(head_read(), [&] {
                return layers_.head.forward(*backend_, p, *terms.residual, terms.branch, s.head);
            });
        return terms.sum(*backend_);
    }

    // The parameters each layer reads, in forward order (nn/layer_residency.hpp): the
    // embedding's, each block's, and the head's (with the embedding's wte when both are on
    // this stage). A layer reads them only inside reading_forward or reading_backward, which
    // also name the layer read next (forward: the one after; backward: the one before, the
    // embedding's backward reading none).
    [[nodiscard]] std::size_t block_read(std::size_t block) const { return (is_first() ? 1 : 0) + block; }
    [[nodiscard]] std::size_t head_read() const { return reads_.size() - 1; }
    template <class Fn>
    decltype(auto) reading_forward(std::size_t layer, Fn&& fn) const {
        const std::span<const gradient_range> next =
            layer + 1 < reads_.size() ? std::span<const gradient_range>(reads_[layer + 1]) : std::span<const gradient_range>();
        const layers_in_use<flat_parameters<scalar>> in_use(*tensors_, reads_[layer], next);
        return fn();
    }
    template <class Fn>
    decltype(auto) reading_backward(std::size_t layer, Fn&& fn) const {
        const std::size_t first_read = is_first() ? 1 : 0;  // the embedding's backward reads no parameter
        const std::span<const gradient_range> next =
            layer > first_read ? std::span<const gradient_range>(reads_[layer - 1]) : std::span<const gradient_range>();
        const layers_in_use<flat_parameters<scalar>> in_use(*tensors_, reads_[layer], next);
        return fn();
    }
    [[nodiscard]] std::vector<std::vector<gradient_range>> layer_reads() const {
        std::vector<std::vector<gradient_range>> out;
        if (is_first()) out.push_back({layers_.embed_range});
        for (const gradient_range block : layers_.block_ranges) out.push_back({block});
        if (is_last())
            out.push_back(is_first() ? std::vector<gradient_range>{layers_.head_range, layers_.embed_range}
                                     : std::vector<gradient_range>{layers_.head_range});
        return out;
    }

    struct layers {
        embedding<Backend> embed;  // first stage only
        std::vector<transformer_block<Backend>> blocks;
        lm_head<Backend> head;  // last stage only
        // Each layer's range of the flat gradients (nn/final_gradients.hpp).
        gradient_range embed_range;
        std::vector<gradient_range> block_ranges;
        gradient_range head_range;
    };

    // Registers the layers of `units` in order: embedding, blocks, head (which finds a
    // wte the embedding registered, or registers its own).
    static layers build_layers(parameter_registry& registry, const gpt_config& config, unit_range units,
                               const tp_group<scalar>& tp) {
        config.validate();
        require(units.first >= 0 && units.first < units.last && units.last <= config.num_units(),
                "unit_range", "[" + std::to_string(units.first) + ", " + std::to_string(units.last) + ")",
                "must be a non-empty range within [0, num_units = " + std::to_string(config.num_units()) + ")");
        require(tp.size >= 1, "tensor-parallel size tp", tp.size, "must be at least 1");
        require(tp.rank >= 0 && tp.rank < tp.size, "tensor-parallel rank", tp.rank,
                "must be in [0, tp = " + std::to_string(tp.size) + ")");
        require(config.num_heads % tp.size == 0, "gpt_config.num_heads", config.num_heads,
                "must be divisible by the tensor-parallel size tp = " + std::to_string(tp.size) +
                    " (each tp rank holds whole attention heads)");
        require(config.vocab_size >= tp.size, "gpt_config.vocab_size", config.vocab_size,
                "must be at least the tensor-parallel size tp = " + std::to_string(tp.size) +
                    " (each tp rank holds some vocabulary rows)");
        const int c = config.d_model;
        layers out;
        // A layer's tensors are registered together, so its gradients are one flat range.
        const auto registered_since = [&registry](std::size_t first) {
            return gradient_range{first, registry.total_size()};
        };
        if (units.first == 0) {
            out.embed = embedding<Backend>(registry, config.vocab_size, c, config.seq_len, tp);
            out.embed_range = registered_since(0);
        }
        for (int u = std::max(units.first, 1); u < std::min(units.last, config.num_layers + 1); ++u) {
            const std::size_t first = registry.total_size();
            out.blocks.emplace_back(registry, u - 1, c, config.num_heads, config.seq_len, tp);
            out.block_ranges.push_back(registered_since(first));
        }
        if (units.last == config.num_units()) {
            const std::size_t first = registry.total_size();
            out.head = lm_head<Backend>(registry, config.vocab_size, c, tp);
            // A head sharing the embedding's wte registers only ln_f; its wte gradient is in
            // the embedding's range, which backward reports after the head's weight half.
            out.head_range = registered_since(first);
        }
        return out;
    }

    Backend* backend_;
    gpt_config config_;
    unit_range units_;
    tp_group<scalar> tp_;
    std::unique_ptr<flat_parameters<scalar>> owned_;  // null when the tensors are borrowed
    flat_parameters<scalar>* tensors_;
    layers layers_;
    std::vector<std::vector<gradient_range>> reads_;  // see block_read
};

}  // namespace weft::nn
