// The bytes SWARM processes exchange: one message is a fixed header (magic, wire version,
// kind) and then its fields in order. Writers append fields; readers take them back in the
// same order and check every length against the bytes there are, so a message of the wrong
// size or from another wire version is refused with a message naming the sender and the
// field, never read past its end.
//
// Float arrays (activations and their gradients) travel plain or blockwise 8-bit quantized
// (swarm/quantize.hpp); the reader takes either form, so the choice is the sender's.
// Integers and floats go as the host writes them: every host must be little-endian, as
// every platform weft runs on is.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/quantize.hpp"

namespace weft::swarm {

static_assert(std::endian::native == std::endian::little,
              "weft's SWARM wire form copies integers and floats as the host holds them: a big-endian host "
              "would need byte swaps");

inline constexpr std::uint32_t wire_magic = 0x54465757;  // "WWFT" read as little-endian bytes
inline constexpr std::uint16_t wire_version = 2;  // 2: state requests name their stage; redirect
inline constexpr std::size_t wire_header_bytes = 8;  // magic, version, kind

// What a message asks or answers. Calls carry an id the answer repeats.
enum class message_kind : std::uint16_t {
    hello = 1,       // worker -> rendezvous: I am here (requested id and stage, state address)
    welcome,         // rendezvous -> worker: your id, stage, step, the run's settings, peers to fetch from
    ready,           // worker -> rendezvous: I hold the state of this step and serve calls
    heartbeat,       // worker -> rendezvous, every interval
    heartbeat_ack,   // rendezvous -> worker: the trainer is alive
    rejoin,          // rendezvous -> worker: your state is stale (or you move): fetch it again
    forward,         // F of one micro-batch at one stage
    forward_reply,
    backward,        // recompute F, then B, keeping the weight gradient as (step, micro-batch)
    backward_reply,  // (the last stage's also carries the loss)
    collect,         // send the sum of your kept contributions for these micro-batches
    collect_reply,
    apply,           // the stage's averaged gradient: step the optimizer with it
    apply_reply,
    refused,         // a call not served (an older step, a state not held), with the reason
    state_request,   // joining worker -> peer: the state's manifest (count 0) or a chunk of it
    state_reply,
    stop,            // the run is over: exit
    redirect,        // worker -> newcomer that said hello to it: the trainer's address
};

[[nodiscard]] constexpr std::string_view to_string(message_kind kind) {
    switch (kind) {
        case message_kind::hello: return "hello";
        case message_kind::welcome: return "welcome";
        case message_kind::ready: return "ready";
        case message_kind::heartbeat: return "heartbeat";
        case message_kind::heartbeat_ack: return "heartbeat_ack";
        case message_kind::rejoin: return "rejoin";
        case message_kind::forward: return "forward";
        case message_kind::forward_reply: return "forward_reply";
        case message_kind::backward: return "backward";
        case message_kind::backward_reply: return "backward_reply";
        case message_kind::collect: return "collect";
        case message_kind::collect_reply: return "collect_reply";
        case message_kind::apply: return "apply";
        case message_kind::apply_reply: return "apply_reply";
        case message_kind::refused: return "refused";
        case message_kind::state_request: return "state_request";
        case message_kind::state_reply: return "state_reply";
        case message_kind::stop: return "stop";
        case message_kind::redirect: return "redirect";
    }
    return "unknown";
}

inline constexpr std::uint16_t last_message_kind = static_cast<std::uint16_t>(message_kind::redirect);

// How a float array is written: plain (4 bytes a value) or blockwise 8-bit.
enum class float_form : std::uint8_t { plain = 0, quantized = 1 };

class message_writer {
public:
    explicit message_writer(message_kind kind) {
        put(wire_magic);
        put(wire_version);
        put(static_cast<std::uint16_t>(kind));
    }

    template <class T>
        requires std::is_trivially_copyable_v<T>
    message_writer& put(T value) {
        // resize and memcpy, not insert: GCC 12 at -O3 misreads an insert of a few bytes into a
        // freshly grown vector as an overflow (-Wstringop-overflow, a false positive).
        const std::size_t at = bytes_.size();
        bytes_.resize(at + sizeof(T));
        std::memcpy(bytes_.data() + at, &value, sizeof(T));
        plain_ += sizeof(T);
        return *this;
    }
    message_writer& put_string(std::string_view text) {
        put(static_cast<std::uint64_t>(text.size()));
        const auto* first = reinterpret_cast<const std::byte*>(text.data());
        bytes_.insert(bytes_.end(), first, first + text.size());
        plain_ += text.size();
        return *this;
    }
    message_writer& put_ints(std::span<const std::int32_t> values) {
        put(static_cast<std::uint64_t>(values.size()));
        append(std::as_bytes(values));
        plain_ += values.size_bytes();
        return *this;
    }
    // block 0: plain; otherwise blockwise 8-bit with `block` values a scale.
    message_writer& put_floats(std::span<const float> values, std::size_t block = 0) {
        const std::size_t plain_before = plain_;
        if (block == 0) {
            put(float_form::plain);
            put(static_cast<std::uint64_t>(values.size()));
            append(std::as_bytes(values));
        } else {
            put(float_form::quantized);
            const std::vector<std::byte> encoded = encode(quantize_blockwise(values, block));
            put(static_cast<std::uint64_t>(encoded.size()));
            append(encoded);
        }
        // The plain form's size, whichever was written.
        plain_ = plain_before + 1 + sizeof(std::uint64_t) + values.size_bytes();
        return *this;
    }

    [[nodiscard]] std::size_t size() const { return bytes_.size(); }
    // The size the message would have with every float array plain: what compression saves.
    [[nodiscard]] std::size_t plain_size() const { return plain_; }
    [[nodiscard]] std::vector<std::byte> take() { return std::move(bytes_); }

private:
    void append(std::span<const std::byte> bytes) { bytes_.insert(bytes_.end(), bytes.begin(), bytes.end()); }
    std::vector<std::byte> bytes_;
    std::size_t plain_ = 0;
};

class message_reader {
public:
    // `sender` names where the bytes came from, for the errors ("worker 3", "the rendezvous").
    message_reader(std::span<const std::byte> bytes, std::string sender)
        : bytes_(bytes), sender_(std::move(sender)) {
        if (bytes.size() < wire_header_bytes)
            fail("its size", std::to_string(bytes.size()) + " bytes",
                 "must be at least the " + std::to_string(wire_header_bytes) + "-byte header");
        const auto magic = get<std::uint32_t>("magic");
        if (magic != wire_magic) fail("its magic", std::to_string(magic), "is not a weft SWARM message");
        const auto version = get<std::uint16_t>("wire version");
        if (version != wire_version)
            fail("its wire version", version,
                 "must be " + std::to_string(wire_version) +
                     ", the version this build speaks (run the same weft on every host)");
        const auto kind = get<std::uint16_t>("kind");
        if (kind < 1 || kind > last_message_kind)
            fail("its kind", kind, "must be in [1, " + std::to_string(last_message_kind) + "]");
        kind_ = static_cast<message_kind>(kind);
    }

    [[nodiscard]] message_kind kind() const { return kind_; }
    [[nodiscard]] const std::string& sender() const { return sender_; }
    // The size the message would have with every float array read so far plain.
    [[nodiscard]] std::size_t plain_size() const {
        return static_cast<std::size_t>(static_cast<std::ptrdiff_t>(bytes_.size()) + saved_);
    }

    template <class T>
        requires std::is_trivially_copyable_v<T>
    [[nodiscard]] T get(const char* field) {
        T value;
        std::memcpy(&value, take(field, sizeof(T)).data(), sizeof(T));
        return value;
    }
    [[nodiscard]] std::string get_string(const char* field) {
        const auto bytes = take(field, count(field, 1));
        return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
    }
    [[nodiscard]] std::vector<std::int32_t> get_ints(const char* field) {
        const auto bytes = take(field, count(field, sizeof(std::int32_t)) * sizeof(std::int32_t));
        std::vector<std::int32_t> values(bytes.size() / sizeof(std::int32_t));
        std::memcpy(values.data(), bytes.data(), bytes.size());
        return values;
    }
    [[nodiscard]] std::vector<float> get_floats(const char* field) {
        const auto form = get<std::uint8_t>(field);
        if (form == static_cast<std::uint8_t>(float_form::plain)) {
            const auto bytes = take(field, count(field, sizeof(float)) * sizeof(float));
            std::vector<float> values(bytes.size() / sizeof(float));
            std::memcpy(values.data(), bytes.data(), bytes.size());
            return values;
        }
        if (form != static_cast<std::uint8_t>(float_form::quantized))
            fail(std::string("field '") + field + "'", "form " + std::to_string(form),
                 "must be 0 (plain) or 1 (quantized)");
        const auto bytes = take(field, count(field, 1));
        try {
            const quantized q = decode(bytes);
            std::vector<float> values(q.count);
            dequantize_blockwise(q, values);
            saved_ += static_cast<std::ptrdiff_t>(values.size() * sizeof(float)) - static_cast<std::ptrdiff_t>(bytes.size());
            return values;
        } catch (const error& e) {
            fail(std::string("field '") + field + "'", "its quantized form", e.what());
        }
    }
    // Every byte was read: a longer message is one of the wrong size too.
    void finish() const {
        if (at_ != bytes_.size())
            fail("its size", std::to_string(bytes_.size()) + " bytes",
                 "must be the " + std::to_string(at_) + " bytes its fields take (" +
                     std::string(to_string(kind_)) + ")");
    }

private:
    template <class T>
    [[noreturn]] void fail(const std::string& what, const T& value, const std::string& valid) const {
        throw invalid_argument("SWARM message from " + sender_ + ": " + what, value, valid);
    }
    // A length prefix, checked against the bytes left before anything is allocated.
    std::size_t count(const char* field, std::size_t element_bytes) {
        const auto n = get<std::uint64_t>(field);
        const std::size_t left = bytes_.size() - at_;
        if (n > left / element_bytes)
            fail(std::string("field '") + field + "'", std::to_string(n) + " elements",
                 "must fit in the " + std::to_string(left) + " bytes left (a message of the wrong size)");
        return static_cast<std::size_t>(n);
    }
    std::span<const std::byte> take(const char* field, std::size_t n) {
        if (bytes_.size() - at_ < n)
            fail(std::string("field '") + field + "'", std::to_string(n) + " bytes at byte " + std::to_string(at_),
                 "must lie within the message's " + std::to_string(bytes_.size()) +
                     " bytes (a message of the wrong size)");
        const auto out = bytes_.subspan(at_, n);
        at_ += n;
        return out;
    }

    std::span<const std::byte> bytes_;
    std::string sender_;
    std::size_t at_ = 0;
    std::ptrdiff_t saved_ = 0;  // bytes the quantized float arrays read so far saved
    message_kind kind_ = message_kind::hello;
};

}  // namespace weft::swarm
