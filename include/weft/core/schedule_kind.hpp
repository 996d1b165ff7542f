// A runtime handle on a pipeline schedule: it points at the constexpr description each
// schedule type in sched/ declares (its name and the layouts it can run). core/ only
// knows the shape of a description, never the schedules, so parallel_config can check a
// layout without depending on the generators; the list of schedules is sched/schedule_list.hpp.
#pragma once

#include <ostream>
#include <string>
#include <string_view>

#include "weft/core/error.hpp"

namespace weft {

// How many model chunks (stages) per pipeline rank a schedule can run; its stage placement
// fixes this.
struct chunk_rule {
    int min = 1;
    int max = 1;  // 0 = no upper bound
    int default_count = 1;  // what the CLIs, examples and tests use when none is asked for
    // Completes "schedule <name> ...", e.g. "runs one stage per rank": the reason a user reads
    // when their chunk count is refused.
    std::string_view why{};

    [[nodiscard]] constexpr bool allows(int chunks) const { return chunks >= min && (max == 0 || chunks <= max); }

    // The valid counts as the end of an error message: "1", "at least 1", "2 to 4".
    [[nodiscard]] std::string valid_text() const {
        if (max == min) return std::to_string(min);
        if (max == 0) return "at least " + std::to_string(min);
        return std::to_string(min) + " to " + std::to_string(max);
    }
};

class schedule_kind {
public:
    // What a schedule type declares about itself, as a static constexpr member named
    // `description` next to its generator (see sched/one_f_one_b.hpp).
    struct description {
        std::string_view name;
        chunk_rule chunks{.why = "runs one stage per rank"};  // unless the schedule says otherwise
        // microbatches must be >= this times pp (1F1B: 1, its warm-up must fill the pipeline).
        // Generators check their other needs themselves.
        int min_microbatches_per_rank = 0;
    };

    // None chosen: an engine runs the first schedule of its compile-time set.
    constexpr schedule_kind() = default;
    // Points at `d`, which must outlive the kind: a schedule type's static description does.
    constexpr explicit schedule_kind(const description& d) : description_(&d), chosen_(true) {}

    [[nodiscard]] constexpr bool chosen() const { return chosen_; }
    [[nodiscard]] constexpr std::string_view name() const { return chosen() ? description_->name : "none"; }
    [[nodiscard]] constexpr int default_chunks() const { return chosen() ? description_->chunks.default_count : 1; }

    // Throws weft::error naming "chunks" or "microbatches" when this schedule cannot run pp
    // ranks with that many micro-batches and chunks per rank. A kind not chosen accepts every
    // layout: the schedule is not known yet.
    constexpr void check_layout(int pp, int microbatches, int chunks) const {
        if (!chosen()) return;
        const description& d = *description_;
        if (!d.chunks.allows(chunks))
            throw invalid_argument("chunks", chunks,
                                   "schedule " + std::string(d.name) + " " + std::string(d.chunks.why) +
                                       "; valid: " + d.chunks.valid_text());
        // Widened so that a huge pp cannot overflow into a pass.
        if (microbatches < static_cast<long long>(d.min_microbatches_per_rank) * pp)
            throw invalid_argument("microbatches", microbatches,
                                   "schedule " + std::string(d.name) + " needs at least " +
                                       (d.min_microbatches_per_rank == 1
                                            ? std::string("as many micro-batches as pipeline stages")
                                            : std::to_string(d.min_microbatches_per_rank) +
                                                  " micro-batches per pipeline stage") +
                                       " (pp = " + std::to_string(pp) + ")");
    }

    // By name, not by address: the schedule list asserts names are unique, so a kind made
    // from a copy of a description still equals the schedule's own.
    [[nodiscard]] friend constexpr bool operator==(schedule_kind a, schedule_kind b) {
        return a.chosen() == b.chosen() && a.name() == b.name();
    }

private:
    const description* description_ = nullptr;
    // Not `description_ != nullptr`: with sanitizers GCC keeps null-pointer checks
    // (-fno-delete-null-pointer-checks) and no longer folds an object's address against
    // null in constant expressions, which the schedule list's static_asserts need.
    bool chosen_ = false;
};

[[nodiscard]] constexpr std::string_view to_string(schedule_kind kind) { return kind.name(); }

// For messages and test output: the schedule's name, or "none".
inline std::ostream& operator<<(std::ostream& out, schedule_kind kind) { return out << kind.name(); }

}  // namespace weft
