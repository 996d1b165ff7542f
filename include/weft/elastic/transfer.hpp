// Carries out a transition plan (elastic/transition_plan.hpp) on one rank: it turns this
// rank's training state in the current layout into its state in the new one.
//
// Pairs of ranks meet in a fixed, deadlock-free order: in round s = 1, 2, ... rank r meets
// r xor s, and the lower rank of the pair sends first. What a rank already holds moves by
// local copy. Long runs go straight from the old buffer into the new one, short runs are
// packed into one send and one receive buffer.
//
// Memory: the state moves one buffer kind at a time (parameters, then each optimizer
// tensor); the between-steps gradients, which are zero, are dropped first and made again
// last. Within a kind, the state's buffers are paged (core/state_vector.hpp): a new buffer
// takes memory page by page as data lands in it, and an old one gives each page back once
// its last read is done (elastic/page_ledger.hpp). Every pair's stream of a kind advances
// in the same number of steps, an equal share each step, with at most half the staging cap
// received and half sent per rank and step, so that what a rank gains and what it gives
// back grow together. The figures record what each rank held, page by page, against
// max(old, new) + 2 x cap.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/core/error.hpp"
#include "weft/core/state_vector.hpp"
#include "weft/elastic/layout.hpp"
#include "weft/elastic/page_ledger.hpp"
#include "weft/elastic/reserved_buffers.hpp"
#include "weft/elastic/transition_plan.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/optim/any_optimizer.hpp"
#include "weft/shard/stage_tensors.hpp"
#include "weft/shard/training_state.hpp"

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
    std::size_t bytes_made_ahead = 0;   // new buffers taken from those made ahead (a joiner's)
    [[nodiscard]] std::size_t memory_bound_bytes(std::size_t staging_cap) const {
        return std::max(old_state_bytes, new_state_bytes) + 2 * staging_cap;
    }
};

// What every rank agrees on before anything moves (the engine takes it from a collective):
// the scalars of the training state, and which optimizer state tensors any rank keeps.
struct shared_scalars {
    shard::training_progress progress;
    std::uint64_t optimizer_steps = 0;
    double learning_rate = 0;              // the optimizers' current one (a schedule may have set it)
    std::vector<bool> kept_state_tensors;  // per optimizer state tensor, in the optimizer's order
};

namespace detail {

template <class Scalar>
void free_staging(std::vector<Scalar>& v, memory_meter& meter) {
    meter.remove(v.capacity() * sizeof(Scalar));
    std::vector<Scalar>().swap(v);
}

template <class Scalar, class Comm>
class state_mover {
    using state_type = shard::training_state<Scalar>;

    // One stage of the current layout, its optimizer state moved out.
    struct old_stage {
        int index = 0;
        shard::stage_tensors<Scalar> tensors;
        optim::optimizer_state<Scalar> optimizer;
        page_ledger<Scalar> ledger;  // of the buffer the current wave empties
    };
    // One stage of the new layout as it is filled.
    struct new_stage {
        stage_holding holding;
        nn::flat_parameters<Scalar> full;
        state_vector<Scalar> parameter_range;
        std::vector<state_vector<Scalar>> optimizer;
        page_ledger<Scalar> ledger;  // of the buffer the current wave fills
    };
    // The buffer kind a wave moves: parameters, or optimizer state tensor `tensor`.
    struct wave {
        held_class what;
        std::size_t tensor;
    };
    // One pair's transfers of a wave in one direction, or a rank's local copies, walked in
    // order a slice at a time.
    struct stream {
        std::vector<const transfer*> transfers;
        std::size_t length = 0;  // elements
        std::size_t index = 0;   // the cursor: the transfer, and elements of it done
        std::size_t offset = 0;
        std::size_t done = 0;
    };
    // `count` elements of a transfer from element `offset` of it.
    struct piece {
        const transfer* t;
        std::size_t offset;
        std::size_t count;
    };

public:
    state_mover(const layout& from, const layout& to, const transition_plan& plan, Comm& world,
                const transfer_options& options, reserved_buffers<Scalar>* reserved)
        : from_(from),
          to_(to),
          plan_(plan),
          world_(world),
          me_(world.rank()),
          cap_elements_(std::max<std::size_t>(1, options.staging_bytes / sizeof(Scalar))),
          reserved_(reserved) {}

    state_type run(state_type&& old_state, const optim::optimizer_options& optimizer, const shared_scalars& scalars) {
        take_old(std::move(old_state));
        make_new();
        figures_.old_state_bytes = meter_.now();
        if (reserved_ != nullptr) {  // what this move fills of them is held from now on
            const auto kept = static_cast<std::size_t>(
                std::count(scalars.kept_state_tensors.begin(), scalars.kept_state_tensors.end(), true));
            reserved_->keep_only(state_buffer_sizes(to_, me_, kept));
            meter_.add(reserved_->bytes());
        }
        // The between-steps gradients are zero: nothing of them moves.
        for (old_stage& s : old_)
            if (s.tensors.full.holds_gradients()) {
                meter_.remove(state_buffer_bytes<Scalar>(s.tensors.full.padded_size()));
                s.tensors.full.release_gradients();
            }
        std::vector<wave> waves;
        for (std::size_t k = 0; k < scalars.kept_state_tensors.size(); ++k)
            if (scalars.kept_state_tensors[k]) waves.push_back({held_class::optimizer_state, k});
        if (parameters_last(waves.size()))
            waves.push_back({held_class::parameters, 0});
        else
            waves.insert(waves.begin(), {held_class::parameters, 0});
        for (const wave& w : waves) run_wave(w);
        free_staging(send_buffer_, meter_);
        free_staging(recv_buffer_, meter_);
        return finish(optimizer, scalars);
    }

    [[nodiscard]] const transfer_figures& figures() const { return figures_; }

private:
    void take_old(state_type&& state) {
        for (auto& s : state.stages) {
            old_stage o{s.index, std::move(s.tensors), s.optimizer.take_state(), {}};
            meter_.add(state_buffer_bytes(o.tensors.full.parameter_storage()) +
                       state_buffer_bytes(o.tensors.parameter_range) +
                       (o.tensors.full.holds_gradients() ? state_buffer_bytes<Scalar>(o.tensors.full.padded_size())
                                                         : 0));
            for (const auto& t : o.optimizer.tensors) meter_.add(state_buffer_bytes(t.values));
            old_.push_back(std::move(o));
        }
    }

    void make_new() {
        const int shards = to_.config().zero_stage() == 0 ? 1 : to_.config().dp();
        for (const stage_holding& h : to_.holdings(me_))
            new_.push_back(
                {h, nn::flat_parameters<Scalar>::released(h.registry, static_cast<std::size_t>(shards)), {}, {}, {}});
    }

    // ---- buffer sizes: elastic/reserved_buffers.hpp's flat_, parameter_ and moment_elements --

    // ---- the order of the waves ---------------------------------------------------
    // The sizes, in elements, of one rank's buffers of each kind in a layout.
    struct kind_sizes {
        std::size_t parameters = 0;
        std::size_t gradients = 0;  // held between steps (ZeRO 0 and 1)
        std::size_t moment = 0;     // each optimizer state tensor
    };
    static kind_sizes sizes_of(const layout& l, int rank) {
        kind_sizes out;
        for (const stage_holding& h : l.holdings(rank)) {
            out.parameters += parameter_elements(l, h);
            out.gradients += l.config().zero_stage() <= 1 ? flat_elements(l, h) : 0;
            out.moment += moment_elements(l, h);
        }
        return out;
    }
    // Whether the optimizer state moves before the parameters. A wave holds one kind's old
    // and new buffers at once, the kinds done in their new size and the others in their old:
    // moving a kind that shrinks first leaves room for one that grows. Every rank computes
    // the same choice for all ranks from the layouts: the order whose worst rank goes least
    // over max(old, new).
    [[nodiscard]] bool parameters_last(std::size_t moments) const {
        if (moments == 0) return false;
        const auto m = moments;
        long long worst_first = 0, worst_last = 0;
        for (int r = 0; r < plan_.world(); ++r) {
            const kind_sizes o = sizes_of(from_, r), n = sizes_of(to_, r);
            const auto big = [](std::size_t a, std::size_t b) { return std::max(a, b); };
            const std::size_t bound =
                big(o.parameters + m * o.moment + o.gradients, n.parameters + m * n.moment + n.gradients);
            std::size_t first = m * o.moment + big(o.parameters, n.parameters);
            std::size_t last = m * n.moment + big(o.parameters, n.parameters);
            for (std::size_t i = 0; i < m; ++i) {
                const std::size_t others = i * n.moment + (m - 1 - i) * o.moment + big(o.moment, n.moment);
                first = big(first, n.parameters + others);
                last = big(last, o.parameters + others);
            }
            worst_first = std::max(worst_first, static_cast<long long>(first) - static_cast<long long>(bound));
            worst_last = std::max(worst_last, static_cast<long long>(last) - static_cast<long long>(bound));
        }
        return worst_last < worst_first;
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
    // The buffer of the wave's kind and the flat element its first entry is; null when this
    // stage keeps no such buffer (an optimizer state tensor not kept yet).
    struct located {
        state_vector<Scalar>* values = nullptr;
        std::size_t base = 0;
    };
    located old_buffer(const wave& w, old_stage& s) const {
        const int zero = from_.config().zero_stage();
        if (w.what == held_class::parameters) {
            if (zero == 3) return {&s.tensors.parameter_range, s.tensors.range.offset};
            return {&s.tensors.full.parameter_storage(), 0};
        }
        if (w.tensor >= s.optimizer.tensors.size()) return {};
        return {&s.optimizer.tensors[w.tensor].values, zero == 0 ? 0 : s.tensors.range.offset};
    }
    located new_buffer(const wave& w, new_stage& s) const {
        const int zero = to_.config().zero_stage();
        if (w.what == held_class::parameters) {
            if (zero == 3) return {&s.parameter_range, s.holding.range.offset};
            return {&s.full.parameter_storage(), 0};
        }
        return {&s.optimizer.at(w.tensor), zero == 0 ? 0 : s.holding.range.offset};
    }
    // Where a run starts in a buffer, checked to lie inside it.
    static std::size_t inside(const located& b, std::size_t flat, std::size_t length, const char* side) {
        const std::size_t size = b.values == nullptr ? 0 : b.values->size();
        if (b.values == nullptr || flat < b.base || flat + length > b.base + size)
            throw error(std::string("layout switch: a transfer's ") + side + " run [" + std::to_string(flat) + ", " +
                        std::to_string(flat + length) + ") lies outside the buffer [" + std::to_string(b.base) +
                        ", " + std::to_string(b.base + size) + ")");
        return flat - b.base;
    }

    // The first of `p`'s elements to read: in the old buffer, or for a fan-out copy in the new
    // one. The caller calls done_reading() once it has read them.
    const Scalar* source(const wave& w, const piece& p) {
        const transfer& t = *p.t;
        if (t.from_new) {
            new_stage& s = new_of(t.from_stage);
            const located b = new_buffer(w, s);
            return b.values->data() + inside(b, t.from_flat, t.length, "source") + p.offset;
        }
        old_stage& s = old_of(t.from_stage);
        const located b = old_buffer(w, s);
        return b.values->data() + inside(b, t.from_flat, t.length, "source") + p.offset;
    }
    // After reading `p`: pages of the old buffer with no reads left go back.
    void done_reading(const wave& w, const piece& p) {
        const transfer& t = *p.t;
        if (t.from_new) return;
        old_stage& s = old_of(t.from_stage);
        s.ledger.read(inside(old_buffer(w, s), t.from_flat, t.length, "source") + p.offset, p.count);
    }
    // Hands the old buffers' pages whose last read is done back to the kernel.
    void give_back_old() {
        for (old_stage& s : old_) s.ledger.give_back();
    }
    // Where `p` goes, its pages counted as written.
    Scalar* target(const wave& w, const piece& p) {
        const transfer& t = *p.t;
        new_stage& s = new_of(t.to_stage);
        const located b = new_buffer(w, s);
        const std::size_t at = inside(b, t.to_flat, t.length, "target") + p.offset;
        s.ledger.written(at, p.count);
        return b.values->data() + at;
    }

    // The new buffers of the wave's kind: made ahead where the reserve has one of the size
    // (a joiner's), else lazy.
    void allocate_new(const wave& w) {
        const int zero = to_.config().zero_stage();
        for (new_stage& s : new_) {
            std::optional<state_vector<Scalar>> ahead;
            if (w.what == held_class::parameters) {
                if (zero == 3) {
                    ahead = take_reserved(parameter_elements(to_, s.holding));
                    s.parameter_range = ahead ? std::move(*ahead)
                                              : lazy_zeros<Scalar>(parameter_elements(to_, s.holding),
                                                                   s.parameter_range.get_allocator().memory());
                } else if ((ahead = take_reserved(s.full.padded_size()))) {
                    s.full.parameter_storage() = std::move(*ahead);
                } else {
                    s.full.allocate_parameters();
                }
            } else {
                if (s.optimizer.size() <= w.tensor) s.optimizer.resize(w.tensor + 1);
                ahead = take_reserved(moment_elements(to_, s.holding));
                s.optimizer[w.tensor] = ahead ? std::move(*ahead) : lazy_zeros<Scalar>(moment_elements(to_, s.holding));
            }
            state_vector<Scalar>& buffer = *new_buffer(w, s).values;
            s.ledger = ahead ? page_ledger<Scalar>::filled_ahead(buffer, meter_)
                             : page_ledger<Scalar>::filling(buffer, meter_);
        }
    }
    [[nodiscard]] std::optional<state_vector<Scalar>> take_reserved(std::size_t elements) {
        if (reserved_ == nullptr) return std::nullopt;
        auto taken = reserved_->take(elements);
        if (taken) figures_.bytes_made_ahead += state_buffer_bytes(*taken);
        return taken;
    }
    // Ledgers for the old buffers of the wave's kind, every read this rank will make of them
    // announced, and the pages nothing reads given back at once.
    void open_old(const wave& w) {
        for (old_stage& s : old_) {
            const located b = old_buffer(w, s);
            s.ledger = b.values == nullptr ? page_ledger<Scalar>{} : page_ledger<Scalar>::emptying(*b.values, meter_);
        }
        for (const transfer& t : plan_.transfers()) {
            if (t.what != w.what || t.from != me_ || t.from_new) continue;
            old_stage& s = old_of(t.from_stage);
            s.ledger.will_read(inside(old_buffer(w, s), t.from_flat, t.length, "source"), t.length);
        }
        for (old_stage& s : old_) s.ledger.release_unread();
    }
    void free_old(const wave& w) {
        for (old_stage& s : old_) {
            s.ledger.forget();
            if (w.what == held_class::parameters) {
                s.tensors.full.release_parameters();
                state_vector<Scalar>(s.tensors.parameter_range.get_allocator()).swap(s.tensors.parameter_range);
            } else if (w.tensor < s.optimizer.tensors.size()) {
                auto& values = s.optimizer.tensors[w.tensor].values;
                state_vector<Scalar>(values.get_allocator()).swap(values);
            }
        }
    }

    // ---- moving -------------------------------------------------------------------
    // A wave moves one buffer kind. Every pair's stream, and each rank's stream of local
    // copies, advances in the same number of steps, an equal share of it each step, so that
    // what a rank takes (received and copied) and what it gives back (sent and copied) grow
    // together: a rank writes at most half a cap per step, and with its staging (at most a
    // cap) stays within max(old, new) + 2 x cap, give or take a page per buffer.
    void run_wave(const wave& w) {
        allocate_new(w);
        open_old(w);
        std::map<int, stream> sends, receives;
        stream copies;
        const auto world = static_cast<std::size_t>(plan_.world());
        std::vector<std::size_t> read(world), written(world);  // per rank, elements
        for (const transfer& t : plan_.transfers()) {
            if (t.what != w.what || t.from_new) continue;
            read[static_cast<std::size_t>(t.from)] += t.length;
            written[static_cast<std::size_t>(t.to)] += t.length;
            if (t.local()) {
                if (t.to == me_) add(copies, t);
            } else if (t.from == me_) {
                add(sends[t.to], t);
            } else if (t.to == me_) {
                add(receives[t.from], t);
            }
        }
        const std::size_t share = share_elements();
        std::size_t steps = 0;
        for (std::size_t r = 0; r < world; ++r) steps = std::max(steps, (std::max(read[r], written[r]) + share - 1) / share);
        // Round s: rank r meets r xor s; rounds run to the next power of two above the world.
        int rounds = 1;
        while (rounds < plan_.world()) rounds *= 2;
        for (std::size_t step = 0; step < steps; ++step) {
            for (const piece& p : slice(copies, step, steps)) {
                copy_local(w, p);
                give_back_old();
            }
            for (int s = 1; s < rounds; ++s) {
                const int peer = me_ ^ s;
                if (peer >= plan_.world()) continue;
                stream* out = sends.contains(peer) ? &sends[peer] : nullptr;
                stream* in = receives.contains(peer) ? &receives[peer] : nullptr;
                if (me_ < peer) {
                    send_step(w, out, peer, step, steps);
                    receive_step(w, in, peer, step, steps);
                } else {
                    receive_step(w, in, peer, step, steps);
                    send_step(w, out, peer, step, steps);
                }
            }
        }
        // A second copy of an element on this rank (a tied tensor) comes from the first.
        for (const transfer& t : plan_.transfers())
            if (t.what == w.what && t.local() && t.to == me_ && t.from_new)
                for (std::size_t done = 0; done < t.length; done += share)
                    copy_local(w, {&t, done, std::min(share, t.length - done)});
        free_old(w);
    }

    static void add(stream& s, const transfer& t) {
        s.transfers.push_back(&t);
        s.length += t.length;
    }

    void copy_local(const wave& w, const piece& p) {
        const Scalar* from = source(w, p);
        std::copy(from, from + p.count, target(w, p));
        done_reading(w, p);
        figures_.bytes_copied += p.count * sizeof(Scalar);
    }
    // What a rank receives, and what it sends, in one step of a wave at most: half the cap.
    [[nodiscard]] std::size_t share_elements() const { return std::max<std::size_t>(1, cap_elements_ / 2); }

    // The pieces of a stream's slice for `step` of `steps`: an equal share of the stream.
    static std::vector<piece> slice(stream& s, std::size_t step, std::size_t steps) {
        if (s.length == 0) return {};
        const std::size_t end = s.length / steps * (step + 1) + s.length % steps * (step + 1) / steps;
        std::vector<piece> out;
        while (s.done < end) {
            const transfer* t = s.transfers[s.index];
            const std::size_t n = std::min(t->length - s.offset, end - s.done);
            out.push_back({t, s.offset, n});
            s.offset += n;
            s.done += n;
            if (s.offset == t->length) {
                ++s.index;
                s.offset = 0;
            }
        }
        return out;
    }

    // Runs at least this long travel straight from the old buffer into the new one, without
    // staging: two copies fewer than packing them. Shorter runs (slices of tensor-parallel
    // tensors, ZeRO range edges) are packed together into one staged message.
    static constexpr std::size_t direct_elements = std::size_t{16} << 10;

    // Calls fn(pieces, elements, direct) for each message of a slice, in order: a direct
    // message is one long piece; a staged one packs consecutive shorter pieces. Both ends of
    // a pair cut the same messages from the same slice.
    template <class Fn>
    static void for_each_message(const std::vector<piece>& pieces, Fn&& fn) {
        std::size_t first = 0;
        std::size_t packed = 0;
        const auto flush = [&](std::size_t end) {
            if (end > first) fn(std::span<const piece>(pieces.data() + first, end - first), packed, false);
            packed = 0;
        };
        for (std::size_t i = 0; i < pieces.size(); ++i) {
            if (pieces[i].count >= direct_elements) {
                flush(i);
                fn(std::span<const piece>(&pieces[i], 1), pieces[i].count, true);
                first = i + 1;
                continue;
            }
            packed += pieces[i].count;
        }
        flush(pieces.size());
    }

    void reserve(std::vector<Scalar>& buffer, std::size_t elements) {
        if (buffer.size() >= elements) return;
        free_staging(buffer, meter_);
        buffer.resize(elements);
        meter_.add(buffer.capacity() * sizeof(Scalar));
        figures_.staging_peak_bytes =
            std::max(figures_.staging_peak_bytes, (send_buffer_.capacity() + recv_buffer_.capacity()) * sizeof(Scalar));
    }

    void send_step(const wave& w, stream* s, int peer, std::size_t step, std::size_t steps) {
        if (s == nullptr) return;
        for_each_message(slice(*s, step, steps), [&](std::span<const piece> pieces, std::size_t elements, bool direct) {
            const Scalar* data = nullptr;
            if (direct) {
                data = source(w, pieces.front());
            } else {
                reserve(send_buffer_, elements);
                Scalar* out = send_buffer_.data();
                for (const piece& p : pieces) {
                    const Scalar* from = source(w, p);
                    out = std::copy(from, from + p.count, out);
                    done_reading(w, p);
                }
                data = send_buffer_.data();
            }
            const auto bytes = std::as_bytes(std::span<const Scalar>(data, elements));
            world_.isend(bytes, peer, switch_tag).wait();
            if (direct) done_reading(w, pieces.front());
            give_back_old();
            figures_.bytes_sent += bytes.size();
        });
    }

    void receive_step(const wave& w, stream* s, int peer, std::size_t step, std::size_t steps) {
        if (s == nullptr) return;
        for_each_message(slice(*s, step, steps), [&](std::span<const piece> pieces, std::size_t elements, bool direct) {
            if (direct) {
                Scalar* into = target(w, pieces.front());
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
                std::copy(in, in + p.count, target(w, p));
                in += p.count;
            }
        });
    }

    // The new state in the new layout's form, gradients made again, optimizers rebuilt.
    state_type finish(const optim::optimizer_options& optimizer, const shared_scalars& scalars) {
        const int zero = to_.config().zero_stage();
        state_type state;
        state.progress = scalars.progress;
        std::size_t new_state_bytes = 0;
        for (new_stage& s : new_) {
            if (zero <= 1) {
                if (auto ahead = take_reserved(s.full.padded_size())) {
                    s.full.gradient_storage() = std::move(*ahead);  // the meter counts it already
                } else {
                    s.full.allocate_gradients();
                    meter_.add(state_buffer_bytes<Scalar>(s.full.padded_size()));
                }
                new_state_bytes += state_buffer_bytes<Scalar>(s.full.padded_size());
            }
            new_state_bytes += state_buffer_bytes(s.full.parameter_storage()) + state_buffer_bytes(s.parameter_range);
            for (const auto& t : s.optimizer) new_state_bytes += state_buffer_bytes(t);
            shard::stage_tensors<Scalar> tensors(std::move(s.full));
            tensors.range = s.holding.range;
            tensors.zero_stage = zero;
            tensors.parameter_range = std::move(s.parameter_range);
            optim::any_optimizer<Scalar> stepper(optimizer);
            optim::optimizer_state<Scalar> moved{scalars.optimizer_steps, {}};
            const auto state_names = stepper.state_names();
            for (std::size_t k = 0; k < state_names.size(); ++k)
                moved.tensors.push_back({std::string(state_names[k]),
                                         k < s.optimizer.size() ? std::move(s.optimizer[k]) : state_vector<Scalar>{}});
            stepper.import_state(std::move(moved));
            state.stages.push_back({s.holding.stage, s.holding.units, std::move(tensors), std::move(stepper)});
        }
        // A reserve the layout did not use up (it was made for another) is freed.
        if (reserved_ != nullptr && !reserved_->empty()) {
            meter_.remove(reserved_->bytes());
            *reserved_ = reserved_buffers<Scalar>{};
        }
        // What the new state holds once trained on: every page of its buffers.
        figures_.new_state_bytes = new_state_bytes;
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
    std::vector<Scalar> send_buffer_, recv_buffer_;
    memory_meter meter_;
    transfer_figures figures_;
    reserved_buffers<Scalar>* reserved_;  // new buffers made ahead (a joiner's), or null
};

}  // namespace detail

// Turns this rank's `state` in layout `from` into its state in layout `to`, following
// `plan`; collective over `world` (every rank of the plan's world calls it, spares
// included). The new optimizers take `optimizer`'s settings and the shared scalars' step
// count (the engine sets the learning rate on the engine it builds around the state). `figures` receives what this rank
// moved and held. `reserved`: new buffers made ahead (a joiner's: elastic/reserved_buffers.hpp),
// taken by size in place of lazy ones; whatever is left of them is freed.
template <class Scalar, communicator Comm>
[[nodiscard]] shard::training_state<Scalar> move_state(shard::training_state<Scalar>&& state, const layout& from,
                                                       const layout& to, const transition_plan& plan, Comm& world,
                                                       const optim::optimizer_options& optimizer,
                                                       const shared_scalars& scalars, const transfer_options& options,
                                                       transfer_figures& figures,
                                                       reserved_buffers<Scalar>* reserved = nullptr) {
    require(world.size() == plan.world(), "communicator size", world.size(),
            "must equal the plan's world " + std::to_string(plan.world()));
    detail::state_mover<Scalar, Comm> mover(from, to, plan, world, options, reserved);
    auto moved = mover.run(std::move(state), optimizer, scalars);
    figures = mover.figures();
    return moved;
}

}  // namespace weft::elastic
