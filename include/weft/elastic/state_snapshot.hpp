// A rank's training state at a step boundary, copied aside, and its buddy's copy of it: what a
// failure rolls back to (elastic training, run/elastic_trainer.hpp).
//
// A snapshot holds, per stage, exactly what a layout switch reads from a rank (its
// parameters, in the ZeRO form the layout keeps between steps, and each optimizer state
// tensor), plus the scalars (progress, optimizer step count, learning rate). Gradients are
// zero between steps and are made again on restore.
//
// The mirror: every rank sends its snapshot to its buddy, the next rank of the world (ring
// order), and keeps the one its predecessor sends. When a rank fails, its state comes back
// from its buddy's copy; every survivor rolls its own state back to its own copy, so all of
// them resume from one step.
//
// A refresh first agrees (uniformly: comm::mpi::agree, MPIX_Comm_agree under ULFM) that every
// rank finished the step, so no survivor replaces the copy the others still roll back to.
// A rank that dies during the exchange itself may leave its buddy without its new copy
// (held_complete() says): its state is then lost and the run restores from its checkpoint.
// Keeping the previous epoch until the next commits would close that window at twice the
// memory.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/peer_lost.hpp"
#include "weft/core/error.hpp"
#include "weft/core/state_vector.hpp"
#include "weft/elastic/layout.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/shard/stage_tensors.hpp"
#include "weft/shard/training_state.hpp"

namespace weft::elastic {

// The tag a mirror exchange carries.
inline constexpr int mirror_tag = 32002;

template <class Scalar>
struct stage_snapshot {
    int index = 0;
    std::vector<Scalar> parameters;              // the ZeRO-3 range, or the whole (padded) flat buffer
    std::vector<std::vector<Scalar>> optimizer;  // each state tensor (empty: not kept yet)
};

template <class Scalar>
struct state_snapshot {
    long long epoch = -1;  // the step boundary it was taken at; -1: none
    shard::training_progress progress;
    std::uint64_t optimizer_steps = 0;
    double learning_rate = 0;
    std::vector<stage_snapshot<Scalar>> stages;

    [[nodiscard]] bool empty() const { return epoch < 0; }
    [[nodiscard]] std::size_t bytes() const {
        std::size_t n = 0;
        for (const auto& s : stages) {
            n += s.parameters.size();
            for (const auto& t : s.optimizer) n += t.size();
        }
        return n * sizeof(Scalar);
    }
};

// Copies what `state` holds (a rank's whole state at a step boundary).
template <class Scalar>
[[nodiscard]] state_snapshot<Scalar> take_snapshot(const shard::training_state<Scalar>& state, long long epoch) {
    state_snapshot<Scalar> out;
    out.epoch = epoch;
    out.progress = state.progress;
    for (const auto& stage : state.stages) {
        stage_snapshot<Scalar> s;
        s.index = stage.index;
        const auto& t = stage.tensors;
        const auto& parameters = t.zero_stage == 3 ? t.parameter_range : t.full.parameter_storage();
        s.parameters.assign(parameters.begin(), parameters.end());
        for (const auto& view : stage.optimizer.state_views()) s.optimizer.emplace_back(view.values.begin(), view.values.end());
        out.optimizer_steps = stage.optimizer.step_count();
        out.learning_rate = stage.optimizer.lr();
        out.stages.push_back(std::move(s));
    }
    return out;
}

// The training state `snapshot` was taken of, as rank `rank` of `at` holds it, its stage
// indices moved up by `stage_offset` (a failed rank's state beside its buddy's own). The
// sizes are checked against the layout.
template <class Scalar>
[[nodiscard]] shard::training_state<Scalar> restore_snapshot(const state_snapshot<Scalar>& snapshot, const layout& at,
                                                             int rank, const optim::optimizer_options& optimizer,
                                                             int stage_offset = 0) {
    const int zero = at.config().zero_stage();
    const auto shards = static_cast<std::size_t>(zero == 0 ? 1 : at.config().dp());
    const auto holdings = at.holdings(rank);
    require(holdings.size() == snapshot.stages.size(), "snapshot stages", snapshot.stages.size(),
            "must be the " + std::to_string(holdings.size()) + " stages rank " + std::to_string(rank) + " holds in " +
                at.describe());
    shard::training_state<Scalar> state;
    state.progress = snapshot.progress;
    for (std::size_t i = 0; i < holdings.size(); ++i) {
        const stage_holding& h = holdings[i];
        const stage_snapshot<Scalar>& s = snapshot.stages[i];
        require(s.index == h.stage, "snapshot stage", s.index, "must be stage " + std::to_string(h.stage));
        auto full = nn::flat_parameters<Scalar>::released(h.registry, shards);
        state_vector<Scalar> range_values;
        if (zero == 3) {
            require(s.parameters.size() == h.range.size, "snapshot parameters of stage " + std::to_string(s.index),
                    s.parameters.size(), "must be the ZeRO-3 range's " + std::to_string(h.range.size));
            range_values = lazy_zeros<Scalar>(s.parameters.size());
            std::copy(s.parameters.begin(), s.parameters.end(), range_values.begin());
        } else {
            full.allocate_parameters();
            auto& storage = full.parameter_storage();
            require(s.parameters.size() == storage.size(), "snapshot parameters of stage " + std::to_string(s.index),
                    s.parameters.size(), "must be the flat buffer's " + std::to_string(storage.size()));
            std::copy(s.parameters.begin(), s.parameters.end(), storage.begin());
        }
        if (zero <= 1) full.allocate_gradients();  // zero between steps, as the layout keeps them
        shard::stage_tensors<Scalar> tensors(std::move(full));
        tensors.range = h.range;
        tensors.zero_stage = zero;
        tensors.parameter_range = std::move(range_values);
        optim::any_optimizer<Scalar> stepper(optimizer);
        optim::optimizer_state<Scalar> imported{snapshot.optimizer_steps, {}};
        const auto names = stepper.state_names();
        for (std::size_t k = 0; k < names.size(); ++k) {
            state_vector<Scalar> values;
            if (k < s.optimizer.size() && !s.optimizer[k].empty()) {
                values = lazy_zeros<Scalar>(s.optimizer[k].size());
                std::copy(s.optimizer[k].begin(), s.optimizer[k].end(), values.begin());
            }
            imported.tensors.push_back({std::string(names[k]), std::move(values)});
        }
        stepper.import_state(std::move(imported));
        stepper.set_lr(snapshot.learning_rate);
        state.stages.push_back({h.stage + stage_offset, h.units, std::move(tensors), std::move(stepper)});
    }
    return state;
}

// The figures of one mirror refresh on this rank.
struct mirror_figures {
    double seconds = 0;         // copying aside, the exchange and the agreement
    std::size_t own_bytes = 0;  // this rank's snapshot
    std::size_t held_bytes = 0; // the snapshot it keeps for its predecessor
};

// This rank's snapshot and its predecessor's, refreshed together at step boundaries.
template <class Scalar>
class buddy_mirror {
public:
    // The buddy keeping `rank`'s copy in a world of `size`: the next rank, in ring order.
    [[nodiscard]] static int buddy_of(int rank, int size) { return (rank + 1) % size; }
    [[nodiscard]] static int mirrored_by(int rank, int size) { return (rank + size - 1) % size; }

    // Collective over `world` (a communicator with agree(), comm::mpi): snapshots `state`
    // (nullptr on a spare, which holds nothing) at step boundary `epoch`, swaps copies with
    // the ring neighbours and commits; on return every rank holds the same epoch, or the call
    // threw (comm::peer_lost) and the mirror is unusable. An agreement that comes out "no"
    // (a rank is recovering; it voted no) is comm::peer_lost_in_agreement.
    template <class Comm>
    mirror_figures refresh(const shard::training_state<Scalar>* state, long long epoch, Comm& world) {
        const auto start = std::chrono::steady_clock::now();
        // Every rank finished the step: only then may one replace the copy all roll back to.
        if (!world.agree(true))
            throw comm::peer_lost_in_agreement("mirror epoch " + std::to_string(epoch) +
                                               " was not reached by every rank: another is recovering");
        committed_ = false;
        held_complete_ = false;
        if (state != nullptr) {
            own_ = take_snapshot(*state, epoch);
        } else {  // a spare holds nothing but takes part in the ring
            own_ = {};
            own_.epoch = epoch;
        }
        held_ = {};
        held_rank_ = -1;
        if (world.size() > 1) {
            const int next = buddy_of(world.rank(), world.size());
            const int previous = mirrored_by(world.rank(), world.size());
            held_rank_ = previous;
            exchange(world, next, previous);
        }
        held_complete_ = true;
        committed_ = world.agree(true);
        if (!committed_)
            throw comm::peer_lost_in_agreement("mirror epoch " + std::to_string(epoch) +
                                               " was not committed by every rank: another is recovering");
        return {.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                .own_bytes = own_.bytes(),
                .held_bytes = held_.bytes()};
    }

    [[nodiscard]] bool committed() const { return committed_; }
    // The step boundary of this rank's own copy (taken once every rank had reached it).
    [[nodiscard]] long long epoch() const { return own_.epoch; }
    [[nodiscard]] const state_snapshot<Scalar>& own() const { return own_; }
    // The predecessor's snapshot (world rank held_rank() of the world it was taken on).
    [[nodiscard]] const state_snapshot<Scalar>& held() const { return held_; }
    [[nodiscard]] int held_rank() const { return held_rank_; }
    // Whether the predecessor's copy of own().epoch arrived whole (a failure may cut the exchange).
    [[nodiscard]] bool held_complete() const { return held_complete_; }
    void clear() {
        own_ = {};
        held_ = {};
        held_rank_ = -1;
        committed_ = false;
        held_complete_ = false;
    }

private:
    // One header (stage count, then per stage its index, parameter count and each state
    // tensor's count), then the buffers, each in pieces of at most 1 GiB (MPI counts are int).
    static constexpr std::size_t header_words = 256;
    static constexpr std::size_t max_state_tensors = 4;
    static constexpr std::size_t piece_elements = (std::size_t{1} << 30) / sizeof(Scalar);

    static std::array<std::uint64_t, header_words> header_of(const state_snapshot<Scalar>& s) {
        std::array<std::uint64_t, header_words> h{};
        const std::size_t per_stage = 2 + max_state_tensors + 1;
        require(1 + 6 + s.stages.size() * per_stage <= header_words, "mirrored stages", s.stages.size(),
                "must be at most " + std::to_string((header_words - 7) / per_stage));
        std::size_t at = 0;
        h[at++] = s.stages.size();
        h[at++] = static_cast<std::uint64_t>(s.epoch);
        h[at++] = s.progress.step;
        h[at++] = s.progress.samples;
        h[at++] = s.progress.rng_seed;
        h[at++] = s.optimizer_steps;
        std::uint64_t lr_bits = 0;
        static_assert(sizeof(lr_bits) == sizeof(s.learning_rate));
        std::memcpy(&lr_bits, &s.learning_rate, sizeof lr_bits);
        h[at++] = lr_bits;
        for (const auto& stage : s.stages) {
            require(stage.optimizer.size() <= max_state_tensors, "optimizer state tensors", stage.optimizer.size(),
                    "must be at most " + std::to_string(max_state_tensors) + " to be mirrored");
            h[at++] = static_cast<std::uint64_t>(stage.index);
            h[at++] = stage.parameters.size();
            h[at++] = stage.optimizer.size();
            for (std::size_t k = 0; k < max_state_tensors; ++k)
                h[at++] = k < stage.optimizer.size() ? stage.optimizer[k].size() : 0;
        }
        return h;
    }

    static state_snapshot<Scalar> sized_from(const std::array<std::uint64_t, header_words>& h) {
        state_snapshot<Scalar> s;
        std::size_t at = 0;
        const std::size_t stages = h[at++];
        s.epoch = static_cast<long long>(h[at++]);
        s.progress.step = h[at++];
        s.progress.samples = h[at++];
        s.progress.rng_seed = h[at++];
        s.optimizer_steps = h[at++];
        std::memcpy(&s.learning_rate, &h[at++], sizeof s.learning_rate);
        for (std::size_t i = 0; i < stages; ++i) {
            stage_snapshot<Scalar> stage;
            stage.index = static_cast<int>(h[at++]);
            stage.parameters.resize(h[at++]);
            stage.optimizer.resize(h[at++]);
            for (std::size_t k = 0; k < max_state_tensors; ++k, ++at)
                if (k < stage.optimizer.size()) stage.optimizer[k].resize(h[at]);
            s.stages.push_back(std::move(stage));
        }
        return s;
    }

    template <class Fn>
    static void for_each_buffer(state_snapshot<Scalar>& s, Fn&& fn) {
        for (auto& stage : s.stages) {
            fn(stage.parameters);
            for (auto& t : stage.optimizer) fn(t);
        }
    }

    template <class Comm>
    void exchange(Comm& world, int next, int previous) {
        auto header = header_of(own_);
        std::array<std::uint64_t, header_words> incoming{};
        {
            auto r = world.irecv(std::as_writable_bytes(std::span<std::uint64_t>(incoming)), previous, mirror_tag);
            auto s = world.isend(std::as_bytes(std::span<const std::uint64_t>(header)), next, mirror_tag);
            r.wait();
            s.wait();
        }
        held_ = sized_from(incoming);
        std::vector<std::span<std::byte>> into;
        for_each_buffer(held_, [&](std::vector<Scalar>& b) {
            for (std::size_t at = 0; at < b.size(); at += piece_elements)
                into.push_back(std::as_writable_bytes(std::span<Scalar>(b.data() + at, std::min(piece_elements, b.size() - at))));
        });
        std::vector<std::span<const std::byte>> out;
        for_each_buffer(own_, [&](std::vector<Scalar>& b) {
            for (std::size_t at = 0; at < b.size(); at += piece_elements)
                out.push_back(std::as_bytes(std::span<const Scalar>(b.data() + at, std::min(piece_elements, b.size() - at))));
        });
        using request = decltype(world.isend(out.empty() ? std::span<const std::byte>() : out.front(), next, mirror_tag));
        std::vector<request> pending;
        for (const auto& piece : into) pending.push_back(world.irecv(piece, previous, mirror_tag));
        for (const auto& piece : out) pending.push_back(world.isend(piece, next, mirror_tag));
        for (auto& p : pending) p.wait();
    }

    state_snapshot<Scalar> own_;
    state_snapshot<Scalar> held_;
    int held_rank_ = -1;
    bool committed_ = false;
    bool held_complete_ = false;
};

}  // namespace weft::elastic
