// Carries out a transition plan (elastic/transition_plan.hpp) on one rank: it turns this
// rank's training state in the current layout into its state in the new one.
//
// Pairs of ranks meet in a fixed, deadlock-free order: in round s = 1, 2, ... rank r meets
// r xor s, and the lower rank of the pair sends first. Data crosses in messages of at most the
// staging cap: long runs straight from the old buffer into the new one, short runs packed
// into one send and one receive buffer, so staging never holds more than two caps. What a
// rank already holds moves by local copy.
//
// Memory: the state moves one buffer kind at a time (parameters, then each optimizer
// tensor), and each old buffer is freed as soon as its kind has moved; the between-steps
// gradients, which are zero, are dropped first and made again last. A rank thus holds, at
// most, one kind's old and new buffers besides the kinds it has finished or not started.
// The figures record what it actually held, against max(old, new) + 2 x cap.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/core/error.hpp"
#include "weft/elastic/layout.hpp"
#include "weft/elastic/transition_plan.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/shard/stage_tensors.hpp"
#include "weft/train/training_state.hpp"

namespace weft::elastic {

// The tag switch traffic carries; nothing else runs on the world between steps.
inline constexpr int switch_tag = 32001;

struct transfer_options {
    std::size_t staging_bytes = std::size_t{64} << 20;  // the staging cap (--staging-mib)
};

// What one rank's part of a switch did and held.
struct transfer_figures {
    std::size_t bytes_sent = 0;
    std::size_t bytes_received = 0;
    std::size_t bytes_copied = 0;     // moved by local copy
    std::size_t old_state_bytes = 0;  // parameters, gradients and optimizer state held before
    std::size_t new_state_bytes = 0;  // and after
    std::size_t staging_peak_bytes = 0;
    std::size_t memory_peak_bytes = 0;  // state plus staging held at once, at most
    [[nodiscard]] std::size_t memory_bound_bytes(std::size_t staging_cap) const {
        return std::max(old_state_bytes, new_state_bytes) + 2 * staging_cap;
    }
};

// What every rank agrees on before anything moves (the engine takes it from a collective):
// the scalars of the training state, and which optimizer state tensors any rank keeps.
struct shared_scalars {
    train::training_progress progress;
    std::uint64_t optimizer_steps = 0;
    double learning_rate = 0;              // the optimizers' current one (a schedule may have set it)
    std::vector<bool> kept_state_tensors;  // per optimizer state tensor, in the optimizer's order
};

namespace detail {

// Bytes held now and at most.
class memory_meter {
public:
    void add(std::size_t bytes) {
        now_ += bytes;
        peak_ = std::max(peak_, now_);
    }
    void remove(std::size_t bytes) { now_ -= std::min(now_, bytes); }
    [[nodiscard]] std::size_t now() const { return now_; }
    [[nodiscard]] std::size_t peak() const { return peak_; }

private:
    std::size_t now_ = 0;
    std::size_t peak_ = 0;
};

template <class Scalar>
void free_vector(std::vector<Scalar>& v, memory_meter& meter) {
    meter.remove(v.capacity() * sizeof(Scalar));
    std::vector<Scalar>().swap(v);
}

template <class Scalar, class Comm>
class state_mover {
    using state_type = train::training_state<Scalar>;

    // One stage of the current layout, its optimizer state moved out.
    struct old_stage {
        int index = 0;
        shard::stage_tensors<Scalar> tensors;
        optim::optimizer_state<Scalar> optimizer;
    };
    // One stage of the new layout as it is filled.
    struct new_stage {
        stage_holding holding;
        nn::flat_parameters<Scalar> full;
        std::vector<Scalar> parameter_range;
        std::vector<std::vector<Scalar>> optimizer;
    };
    // The buffer kind a wave moves: parameters, or optimizer state tensor `tensor`.
    struct wave {
        held_class what;
        std::size_t tensor;
    };

public:
    state_mover(const layout& from, const layout& to, const transition_plan& plan, Comm& world,
                const transfer_options& options)
        : from_(from),
          to_(to),
          plan_(plan),
          world_(world),
          me_(world.rank()),
          cap_elements_(std::max<std::size_t>(1, options.staging_bytes / sizeof(Scalar))) {}

    state_type run(state_type&& old_state, const optim::optimizer_options& optimizer, const shared_scalars& scalars) {
        take_old(std::move(old_state));
        make_new();
        index_pairs();
        figures_.old_state_bytes = meter_.now();
        // The between-steps gradients are zero: nothing of them moves.
        for (old_stage& s : old_)
            if (s.tensors.full.holds_gradients()) {
                meter_.remove(s.tensors.full.padded_size() * sizeof(Scalar));
                s.tensors.full.release_gradients();
            }
        run_wave({held_class::parameters, 0});
        for (std::size_t k = 0; k < scalars.kept_state_tensors.size(); ++k)
            if (scalars.kept_state_tensors[k]) run_wave({held_class::optimizer_state, k});
        free_vector(send_buffer_, meter_);
        free_vector(recv_buffer_, meter_);
        return finish(optimizer, scalars);
    }

    [[nodiscard]] const transfer_figures& figures() const { return figures_; }

private:
    void take_old(state_type&& state) {
        for (auto& s : state.stages) {
            old_stage o{s.index, std::move(s.tensors), s.optimizer.take_state()};
            meter_.add(held_bytes(o.tensors));
            for (const auto& t : o.optimizer.tensors) meter_.add(t.values.capacity() * sizeof(Scalar));
            old_.push_back(std::move(o));
        }
    }

    static std::size_t held_bytes(const shard::stage_tensors<Scalar>& t) {
        return (t.full.padded_parameters().size() + t.parameter_range.capacity() +
                (t.full.holds_gradients() ? t.full.padded_size() : 0)) *
               sizeof(Scalar);
    }

    void make_new() {
        const int shards = to_.config().zero_stage() == 0 ? 1 : to_.config().dp();
        for (const stage_holding& h : to_.holdings(me_))
            new_.push_back(
                {h, nn::flat_parameters<Scalar>::released(h.registry, static_cast<std::size_t>(shards)), {}, {}});
    }

    // Per peer and direction, this rank's transfers with it, in plan order.
    void index_pairs() {
        for (const transfer& t : plan_.transfers()) {
            if (t.from == me_ && t.to == me_)
                local_.push_back(&t);
            else if (t.from == me_)
                sends_[t.to].push_back(&t);
            else if (t.to == me_)
                receives_[t.from].push_back(&t);
        }
    }

    // ---- buffers ------------------------------------------------------------------
    old_stage& old_of(int stage) {
        for (old_stage& s : old_)
            if (s.index == stage) return s;
        throw error("layout switch: the plan reads stage " + std::to_string(stage) + " on rank " + std::to_string(me_) +
                    ", which does not hold it in the current layout");
    }
    new_stage& new_of(int stage) {
        for (new_stage& s : new_)
            if (s.holding.stage == stage) return s;
        throw error("layout switch: the plan writes stage " + std::to_string(stage) + " on rank " +
                    std::to_string(me_) + ", which does not hold it in the new layout");
    }
    // A buffer and the flat element its first entry is.
    template <class T>
    struct located {
        std::span<T> values;
        std::size_t base = 0;
    };

    located<const Scalar> old_buffer(const wave& w, int stage) {
        old_stage& s = old_of(stage);
        const int zero = from_.config().zero_stage();
        if (w.what == held_class::parameters) {
            if (zero == 3) return {s.tensors.parameter_range, s.tensors.range.offset};
            return {s.tensors.full.padded_parameters(), 0};
        }
        return {s.optimizer.tensors.at(w.tensor).values, zero == 0 ? 0 : s.tensors.range.offset};
    }
    located<Scalar> new_buffer(const wave& w, int stage) {
        new_stage& s = new_of(stage);
        const int zero = to_.config().zero_stage();
        if (w.what == held_class::parameters) {
            if (zero == 3) return {s.parameter_range, s.holding.range.offset};
            return {s.full.padded_parameters(), 0};
        }
        return {s.optimizer.at(w.tensor), zero == 0 ? 0 : s.holding.range.offset};
    }
    static void check_inside(std::size_t base, std::size_t size, std::size_t flat, std::size_t length,
                             const char* side) {
        if (flat < base || flat + length > base + size)
            throw error(std::string("layout switch: a transfer's ") + side + " run [" + std::to_string(flat) + ", " +
                        std::to_string(flat + length) + ") lies outside the buffer [" + std::to_string(base) + ", " +
                        std::to_string(base + size) + ")");
    }
    const Scalar* source(const wave& w, const transfer& t) {
        const auto b = t.from_new ? as_const(new_buffer(w, t.from_stage)) : old_buffer(w, t.from_stage);
        check_inside(b.base, b.values.size(), t.from_flat, t.length, "source");
        return b.values.data() + (t.from_flat - b.base);
    }
    Scalar* target(const wave& w, const transfer& t) {
        const auto b = new_buffer(w, t.to_stage);
        check_inside(b.base, b.values.size(), t.to_flat, t.length, "target");
        return b.values.data() + (t.to_flat - b.base);
    }
    static located<const Scalar> as_const(located<Scalar> b) { return {b.values, b.base}; }

    void allocate_new(const wave& w) {
        const int zero = to_.config().zero_stage();
        for (new_stage& s : new_) {
            if (w.what == held_class::parameters) {
                if (zero == 3) {
                    s.parameter_range.assign(s.holding.range.size, Scalar(0));
                    meter_.add(s.parameter_range.capacity() * sizeof(Scalar));
                } else {
                    s.full.allocate_parameters();
                    meter_.add(s.full.padded_size() * sizeof(Scalar));
                }
            } else {
                if (s.optimizer.size() <= w.tensor) s.optimizer.resize(w.tensor + 1);
                const std::size_t n = zero == 0 ? s.holding.registry.total_size() : s.holding.range.valid();
                s.optimizer[w.tensor].assign(n, Scalar(0));
                meter_.add(n * sizeof(Scalar));
            }
        }
    }
    void free_old(const wave& w) {
        for (old_stage& s : old_) {
            if (w.what == held_class::parameters) {
                meter_.remove(s.tensors.full.padded_parameters().size() * sizeof(Scalar));
                s.tensors.full.release_parameters();
                free_vector(s.tensors.parameter_range, meter_);
            } else if (w.tensor < s.optimizer.tensors.size()) {
                free_vector(s.optimizer.tensors[w.tensor].values, meter_);
            }
        }
    }

    // ---- moving -------------------------------------------------------------------
    void run_wave(const wave& w) {
        allocate_new(w);
        for (const transfer* t : local_)
            if (t->what == w.what && !t->from_new) copy_local(w, *t);
        // Round s: rank r meets r xor s; rounds run to the next power of two above the world.
        int rounds = 1;
        while (rounds < plan_.world()) rounds *= 2;
        for (int s = 1; s < rounds; ++s) {
            const int peer = me_ ^ s;
            if (peer >= plan_.world()) continue;
            if (me_ < peer) {
                send_to(w, peer);
                receive_from(w, peer);
            } else {
                receive_from(w, peer);
                send_to(w, peer);
            }
        }
        // A second copy of an element on this rank (a tied tensor) comes from the first.
        for (const transfer* t : local_)
            if (t->what == w.what && t->from_new) copy_local(w, *t);
        free_old(w);
    }

    void copy_local(const wave& w, const transfer& t) {
        const Scalar* from = source(w, t);
        std::copy(from, from + t.length, target(w, t));
        figures_.bytes_copied += t.length * sizeof(Scalar);
    }

    // One piece of a chunk: `count` elements of a transfer from element `offset` of it.
    struct piece {
        const transfer* t;
        std::size_t offset;
        std::size_t count;
    };
    // Runs at least this long travel straight from the old buffer into the new one, a cap at a
    // time, without staging: two copies fewer than packing them. Shorter runs (slices of
    // tensor-parallel tensors, ZeRO range edges) are packed together into staged chunks.
    static constexpr std::size_t direct_elements = std::size_t{16} << 10;

    // Calls fn(pieces, elements, direct) for each message of a pair's transfers of the wave's
    // kind, in order: a direct message is one piece of one long run; a staged one packs up to
    // a cap of shorter runs. Both ends of a pair cut the same messages from the same list.
    template <class Fn>
    void for_each_chunk(const wave& w, const std::vector<const transfer*>& list, Fn&& fn) {
        std::vector<piece> pieces;
        std::size_t filled = 0;
        const auto flush = [&] {
            if (filled == 0) return;
            fn(std::span<const piece>(pieces), filled, false);
            pieces.clear();
            filled = 0;
        };
        for (const transfer* t : list) {
            if (t->what != w.what) continue;
            if (t->length >= direct_elements) {
                flush();
                for (std::size_t done = 0; done < t->length;) {
                    const std::size_t n = std::min(t->length - done, cap_elements_);
                    const piece whole{t, done, n};
                    fn(std::span<const piece>(&whole, 1), n, true);
                    done += n;
                }
                continue;
            }
            std::size_t done = 0;
            while (done < t->length) {
                const std::size_t n = std::min(t->length - done, cap_elements_ - filled);
                pieces.push_back({t, done, n});
                done += n;
                filled += n;
                if (filled == cap_elements_) flush();
            }
        }
        flush();
    }

    void reserve(std::vector<Scalar>& buffer, std::size_t elements) {
        if (buffer.size() >= elements) return;
        free_vector(buffer, meter_);
        buffer.resize(elements);
        meter_.add(buffer.capacity() * sizeof(Scalar));
        figures_.staging_peak_bytes =
            std::max(figures_.staging_peak_bytes, (send_buffer_.capacity() + recv_buffer_.capacity()) * sizeof(Scalar));
    }

    void send_to(const wave& w, int peer) {
        const auto it = sends_.find(peer);
        if (it == sends_.end()) return;
        for_each_chunk(w, it->second, [&](std::span<const piece> pieces, std::size_t elements, bool direct) {
            const Scalar* data = nullptr;
            if (direct) {
                data = source(w, *pieces.front().t) + pieces.front().offset;
            } else {
                reserve(send_buffer_, elements);
                Scalar* out = send_buffer_.data();
                for (const piece& p : pieces) {
                    const Scalar* from = source(w, *p.t) + p.offset;
                    out = std::copy(from, from + p.count, out);
                }
                data = send_buffer_.data();
            }
            const auto bytes = std::as_bytes(std::span<const Scalar>(data, elements));
            world_.isend(bytes, peer, switch_tag).wait();
            figures_.bytes_sent += bytes.size();
        });
    }

    void receive_from(const wave& w, int peer) {
        const auto it = receives_.find(peer);
        if (it == receives_.end()) return;
        for_each_chunk(w, it->second, [&](std::span<const piece> pieces, std::size_t elements, bool direct) {
            if (direct) {
                Scalar* into = target(w, *pieces.front().t) + pieces.front().offset;
                world_.irecv(std::as_writable_bytes(std::span<Scalar>(into, elements)), peer, switch_tag).wait();
                figures_.bytes_received += elements * sizeof(Scalar);
                return;
            }
            reserve(recv_buffer_, elements);
            const auto bytes = std::as_writable_bytes(std::span<Scalar>(recv_buffer_.data(), elements));
            world_.irecv(bytes, peer, switch_tag).wait();
            figures_.bytes_received += bytes.size();
            const Scalar* in = recv_buffer_.data();
            for (const piece& p : pieces) {
                std::copy(in, in + p.count, target(w, *p.t) + p.offset);
                in += p.count;
            }
        });
    }

    // The new state in the new layout's form, gradients made again, optimizers rebuilt.
    state_type finish(const optim::optimizer_options& optimizer, const shared_scalars& scalars) {
        const int zero = to_.config().zero_stage();
        state_type state;
        state.progress = scalars.progress;
        for (new_stage& s : new_) {
            if (zero <= 1) {
                s.full.allocate_gradients();
                meter_.add(s.full.padded_size() * sizeof(Scalar));
            }
            shard::stage_tensors<Scalar> tensors(std::move(s.full));
            tensors.range = s.holding.range;
            tensors.zero_stage = zero;
            tensors.parameter_range = std::move(s.parameter_range);
            optim::any_optimizer<Scalar> stepper(optimizer);
            optim::optimizer_state<Scalar> moved{scalars.optimizer_steps, {}};
            const auto state_names = stepper.state_names();
            for (std::size_t k = 0; k < state_names.size(); ++k)
                moved.tensors.push_back({std::string(state_names[k]),
                                         k < s.optimizer.size() ? std::move(s.optimizer[k]) : std::vector<Scalar>{}});
            stepper.import_state(std::move(moved));
            state.stages.push_back({s.holding.stage, s.holding.units, std::move(tensors), std::move(stepper)});
        }
        figures_.new_state_bytes = meter_.now();
        figures_.memory_peak_bytes = meter_.peak();
        return state;
    }

    const layout& from_;
    const layout& to_;
    const transition_plan& plan_;
    Comm& world_;
    int me_;
    std::size_t cap_elements_;
    std::vector<old_stage> old_;
    std::vector<new_stage> new_;
    std::vector<const transfer*> local_;
    std::map<int, std::vector<const transfer*>> sends_, receives_;
    std::vector<Scalar> send_buffer_, recv_buffer_;
    memory_meter meter_;
    transfer_figures figures_;
};

}  // namespace detail

// Turns this rank's `state` in layout `from` into its state in layout `to`, following
// `plan`; collective over `world` (every rank of the plan's world calls it, spares
// included). The new optimizers take `optimizer`'s settings and the shared scalars' step
// count (the engine sets the learning rate on the engine it builds around the state). `figures` receives what this rank
// moved and held.
template <class Scalar, communicator Comm>
[[nodiscard]] train::training_state<Scalar> move_state(train::training_state<Scalar>&& state, const layout& from,
                                                       const layout& to, const transition_plan& plan, Comm& world,
                                                       const optim::optimizer_options& optimizer,
                                                       const shared_scalars& scalars, const transfer_options& options,
                                                       transfer_figures& figures) {
    require(world.size() == plan.world(), "communicator size", world.size(),
            "must equal the plan's world " + std::to_string(plan.world()));
    detail::state_mover<Scalar, Comm> mover(from, to, plan, world, options);
    auto moved = mover.run(std::move(state), optimizer, scalars);
    figures = mover.figures();
    return moved;
}

}  // namespace weft::elastic
