// What a CUDA graph of one action (a stage's F, B, I or W on one micro-batch) must know to be
// replayed without queueing the action's work again: the order of its stream work, its
// allocations and its uploads, as the host code made them when the graph was captured.
//
// An action's graph (weft/exec/cuda/action_graphs.hpp) is captured on the action's second
// call, after one eager call that warms caches and measures its uploads. On every later call
// the host code of the layers runs again, as a shadow of the capture: it computes shapes,
// checks its input, makes the matrices it hands on and writes this step's token ids into
// the graph's upload buffers, but queues nothing. Each kernel launch, GEMM and copy asks
// this recording first (replaying() is then true and it skips its call), each allocation
// gets back the address the capture got (a graph's allocations keep their addresses), and
// one graph launch then does the work.
//
// A shadow must be the capture's twin. Every piece of stream work and every allocation adds
// its name and arguments (pointers, sizes, scalars) to a signature, and the shadow compares
// piece by piece: at the first difference (a weight buffer that moved, a changed shape) it
// throws before anything is launched, naming the action and the operation, rather than
// replay work on stale addresses. Same signature, same work: the graph does what the
// eager calls would have done.
//
// This file has no CUDA: tests run it on any machine. One recording is current per thread
// (recording_scope), as CUDA's thread-local stream capture is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::exec::cuda_detail {

enum class recording_mode {
    measuring,  // the eager warm-up call: uploads are counted, nothing else changes
    capturing,  // the call under stream capture: everything is noted
    replaying,  // the shadow: everything is compared, nothing is queued
};

class action_recording {
public:
    // `action`: the action in words, for messages ("F of stage 1, micro-batch 3").
    explicit action_recording(std::string action) : action_(std::move(action)) {}

    [[nodiscard]] const std::string& action() const { return action_; }
    [[nodiscard]] recording_mode mode() const { return mode_; }
    [[nodiscard]] bool replaying() const { return mode_ == recording_mode::replaying; }

    // Starts a call in `mode`. Capturing forgets the previous capture; replaying needs one.
    void start(recording_mode mode) {
        if (mode == recording_mode::replaying)
            require(captured_, "action_recording::start: mode", "replaying",
                    "needs a finished capture of " + action_ + " first");
        if (mode == recording_mode::capturing) {
            operations_.clear();
            allocations_.clear();
            captured_ = false;
        }
        if (mode == recording_mode::measuring) upload_bytes_.clear();
        mode_ = mode;
        next_operation_ = next_allocation_ = next_upload_ = 0;
        deferred_frees_.clear();
        held_.clear();
        freed_from_other_graphs_.clear();
    }

    // Called by every piece of stream work before it is queued, with what it reads and writes.
    // Returns true when it must not be queued (a shadow: the graph holds it). Measuring: no
    // note, false.
    template <class... Args>
    bool skip_work(std::string_view what, const Args&... args) {
        if (mode_ == recording_mode::measuring) return false;
        note(what, signature_of(what, args...));
        return mode_ == recording_mode::replaying;
    }

    // Capturing: the address stream capture gave an allocation of `bytes` (fixed for the
    // graph's life). Replaying: the address the same allocation got in the capture.
    void note_allocation(const void* pointer, std::size_t bytes) {
        require(mode_ == recording_mode::capturing, "action_recording::note_allocation", mode_name(),
                "only a capture notes allocations");
        allocations_.push_back({pointer, bytes});
        note("allocation", signature_of("allocation", bytes));
        held_.insert(pointer);
    }
    [[nodiscard]] void* replayed_allocation(std::size_t bytes) {
        require(mode_ == recording_mode::replaying, "action_recording::replayed_allocation", mode_name(),
                "only a shadow reuses the capture's allocations");
        note("allocation", signature_of("allocation", bytes));
        // note() has compared the sizes, so there is one to hand out.
        const void* pointer = allocations_[next_allocation_++].pointer;
        held_.insert(pointer);
        return const_cast<void*>(pointer);
    }
    // A free during a capture or a shadow: memory the graph allocated (`in_graph`) is freed by
    // a node of the graph; other memory (`in_graph` false) cannot be, and waits for
    // take_deferred_frees() to free it after the launch.
    void note_free(void* pointer, bool in_graph, void* stream) {
        require(mode_ != recording_mode::measuring, "action_recording::note_free", mode_name(),
                "a measuring call frees at once");
        if (in_graph) {
            // First: if the note throws, this owner is gone all the same. Memory this call did
            // not hand out (an earlier action's graph made it) is remembered: should the call
            // fail, its graph's free node never runs, and abandon() hands it back for freeing.
            if (held_.erase(pointer) == 0) freed_from_other_graphs_.push_back({pointer, stream});
            note("free", signature_of("free", pointer));
        } else {
            note("free outside the graph", signature_of("free outside the graph"));
            deferred_frees_.push_back({pointer, stream});
        }
    }
    struct deferred_free {
        void* pointer;
        void* stream;
    };
    [[nodiscard]] std::vector<deferred_free> take_deferred_frees() { return std::exchange(deferred_frees_, {}); }

    // Host values going up. Measuring: `bytes` is counted, and the caller uses its own staging.
    // Capturing and replaying: the caller stages them in upload_buffer(i) for the i-th upload
    // (the graph's copy reads that buffer), which the graph's owner makes after the measuring
    // call (set_upload_buffers).
    [[nodiscard]] std::size_t note_upload(std::size_t bytes) {
        if (mode_ == recording_mode::measuring) {
            upload_bytes_.push_back(bytes);
            return upload_bytes_.size() - 1;
        }
        if (next_upload_ >= upload_bytes_.size() || upload_bytes_[next_upload_] != bytes)
            diverged("upload " + std::to_string(next_upload_) + " of " + std::to_string(bytes) + " bytes",
                     next_upload_ < upload_bytes_.size()
                         ? "the measured call uploaded " + std::to_string(upload_bytes_[next_upload_]) + " bytes"
                         : "the measured call made " + std::to_string(upload_bytes_.size()) + " uploads");
        return next_upload_++;
    }
    [[nodiscard]] const std::vector<std::size_t>& upload_bytes() const { return upload_bytes_; }
    void set_upload_buffers(std::vector<void*> buffers) {
        require(buffers.size() == upload_bytes_.size(), "action_recording::set_upload_buffers: buffers",
                buffers.size(), "must be one per measured upload (" + std::to_string(upload_bytes_.size()) + ")");
        upload_buffers_ = std::move(buffers);
    }
    [[nodiscard]] void* upload_buffer(std::size_t index) const {
        require(index < upload_buffers_.size(), "action_recording::upload_buffer: index", index,
                "must be an upload the measured call made (" + std::to_string(upload_buffers_.size()) + ")");
        return upload_buffers_[index];
    }

    // Ends a capture or a shadow: a shadow must have done all the capture did, no less.
    void finish() {
        if (mode_ == recording_mode::replaying) {
            if (next_operation_ != operations_.size())
                diverged("the end of the action", "the capture went on to operation " +
                                                      std::to_string(next_operation_) + " (" +
                                                      std::string(operations_[next_operation_].what) + ")");
            if (next_upload_ != upload_bytes_.size())
                diverged("the end of the action", "the capture made " + std::to_string(upload_bytes_.size()) +
                                                      " uploads, this call " + std::to_string(next_upload_));
        }
        if (mode_ == recording_mode::capturing) {
            if (next_upload_ != upload_bytes_.size())
                diverged("the end of the capture", "the measured call made " +
                                                       std::to_string(upload_bytes_.size()) + " uploads, the capture " +
                                                       std::to_string(next_upload_));
            captured_ = true;
        }
    }

    // A capture or a shadow that failed: nothing of the graph will run, so the addresses it
    // handed out and still held hold no allocation. Their owners (the stash, as the step
    // unwinds) skip their frees: take_abandoned() says so, once per address. The memory of
    // other graphs it freed was not freed after all: take_deferred_frees() now returns it
    // too. The capture is forgotten.
    void abandon() {
        abandoned_addresses().insert(held_.begin(), held_.end());
        held_.clear();
        deferred_frees_.insert(deferred_frees_.end(), freed_from_other_graphs_.begin(),
                               freed_from_other_graphs_.end());
        freed_from_other_graphs_.clear();
        captured_ = false;
        operations_.clear();
        allocations_.clear();
    }
    // The graph of this call was launched: what it handed out and freed is its own business.
    void launched() {
        held_.clear();
        freed_from_other_graphs_.clear();
    }

    // True once for an address abandon() gave up (and forgets it): its free must be skipped.
    [[nodiscard]] static bool take_abandoned(const void* pointer) {
        auto& abandoned = abandoned_addresses();
        return !abandoned.empty() && abandoned.erase(pointer) > 0;
    }

    [[nodiscard]] bool captured() const { return captured_; }
    [[nodiscard]] std::size_t operations() const { return operations_.size(); }
    [[nodiscard]] std::size_t allocations() const { return allocations_.size(); }

private:
    // Per thread, as the matrices holding them are freed on the thread that made them.
    static std::unordered_set<const void*>& abandoned_addresses() {
        thread_local std::unordered_set<const void*> addresses;
        return addresses;
    }

    struct operation {
        std::string_view what;  // a literal: every caller passes one
        std::uint64_t signature;
    };
    struct allocation {
        const void* pointer;
        std::size_t bytes;
    };

    // FNV-1a over the name and the arguments' bytes: pointers by address, numbers by value.
    static std::uint64_t mix(std::uint64_t hash, const void* bytes, std::size_t n) {
        const auto* p = static_cast<const unsigned char*>(bytes);
        for (std::size_t i = 0; i < n; ++i) hash = (hash ^ p[i]) * 0x100000001b3ULL;
        return hash;
    }
    template <class T>
    static std::uint64_t mix_value(std::uint64_t hash, const T& value) {
        if constexpr (std::is_pointer_v<T> || std::is_null_pointer_v<T>) {
            const auto address = reinterpret_cast<std::uintptr_t>(value);
            return mix(hash, &address, sizeof address);
        } else if constexpr (std::is_floating_point_v<T>) {
            const double wide = static_cast<double>(value);  // no padding to read
            return mix(hash, &wide, sizeof wide);
        } else if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) {
            const auto wide = static_cast<std::uint64_t>(value);
            return mix(hash, &wide, sizeof wide);
        } else {
            static_assert(std::is_pointer_v<T>, "skip_work takes pointers, numbers and enums: their values are "
                                                "what a replay must repeat");
            return hash;
        }
    }
    template <class... Args>
    static std::uint64_t signature_of(std::string_view what, const Args&... args) {
        std::uint64_t hash = mix(0xcbf29ce484222325ULL, what.data(), what.size());
        ((hash = mix_value(hash, args)), ...);
        return hash;
    }

    void note(std::string_view what, std::uint64_t signature) {
        if (mode_ == recording_mode::capturing) {
            operations_.push_back({what, signature});
            ++next_operation_;
            return;
        }
        if (next_operation_ >= operations_.size())
            diverged("operation " + std::to_string(next_operation_) + " (" + std::string(what) + ")",
                     "the capture ended after " + std::to_string(operations_.size()) + " operations");
        const operation& captured = operations_[next_operation_];
        if (captured.what != what)
            diverged("operation " + std::to_string(next_operation_) + " (" + std::string(what) + ")",
                     "the capture did " + std::string(captured.what) + " there");
        if (captured.signature != signature)
            diverged("operation " + std::to_string(next_operation_) + " (" + std::string(what) + ")",
                     "its pointers, sizes or scalars differ from the capture's");
        ++next_operation_;
    }

    [[noreturn]] void diverged(const std::string& where, const std::string& how) const {
        throw error("CUDA graph of " + action_ + ": this call differs from the captured one at " + where + ": " +
                    how + ". A graph replays fixed addresses and shapes, so this action cannot be replayed; "
                    "run without --cuda-graphs (or report the layout that moved its buffers)");
    }

    [[nodiscard]] std::string mode_name() const {
        switch (mode_) {
            case recording_mode::measuring: return "measuring";
            case recording_mode::capturing: return "capturing";
            case recording_mode::replaying: return "replaying";
        }
        return "?";
    }

    std::string action_;
    recording_mode mode_ = recording_mode::measuring;
    bool captured_ = false;
    std::vector<operation> operations_;
    std::vector<allocation> allocations_;
    std::vector<std::size_t> upload_bytes_;
    std::vector<void*> upload_buffers_;
    std::vector<deferred_free> deferred_frees_;
    std::unordered_set<const void*> held_;  // handed out by this call and not freed in it
    std::vector<deferred_free> freed_from_other_graphs_;  // by this call, in the graph
    std::size_t next_operation_ = 0;
    std::size_t next_allocation_ = 0;
    std::size_t next_upload_ = 0;
};

namespace detail {
inline thread_local action_recording* recording_of_thread = nullptr;
}  // namespace detail

// The recording this thread's stream work reports to (nullptr: none, the work runs eagerly).
[[nodiscard]] inline action_recording* current_recording() { return detail::recording_of_thread; }

// Makes `recording` current for a call in `mode`, and no recording current again after it.
class recording_scope {
public:
    recording_scope(action_recording& recording, recording_mode mode) {
        require(detail::recording_of_thread == nullptr, "recording_scope", recording.action(),
                "an action's graph cannot be recorded inside another's");
        recording.start(mode);
        detail::recording_of_thread = &recording;
    }
    recording_scope(const recording_scope&) = delete;
    recording_scope& operator=(const recording_scope&) = delete;
    ~recording_scope() { detail::recording_of_thread = nullptr; }
};

// For the queueing sites: true when the current recording holds this work (a shadow).
template <class... Args>
[[nodiscard]] inline bool skip_recorded_work(std::string_view what, const Args&... args) {
    action_recording* recording = current_recording();
    return recording != nullptr && recording->skip_work(what, args...);
}

}  // namespace weft::exec::cuda_detail
