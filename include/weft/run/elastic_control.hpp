// The control file of an elastic run (--control FILE): a scheduler or a person appends lines
// `leave RANKS` or `grow N`, a job launched separately to join appends `accept N` (its own
// `--join FILE` does that: run/join_connect.hpp), and the run applies them at its next step
// boundary. This header
// parses and checks a line, and watches the file for lines appended since the run started.
// It needs no MPI: rank 0 polls the file and broadcasts what it read.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::run {

// The most ranks a world may hold (as run::ranks_to_run allows): bounds every number of a
// control line, so that a range such as 0-2000000000 cannot exhaust memory.
inline constexpr int max_control_rank_count = 1 << 16;

// grow: the run starts N processes (MPI_Comm_spawn); accept: N processes launched separately
// are connecting to the run's published port (MPI_Comm_accept).
enum class control_kind { leave, grow, accept };

struct control_command {
    control_kind kind = control_kind::leave;
    std::vector<int> ranks;  // leave: the world ranks leaving, sorted, each once
    int count = 0;           // grow, accept: the processes to take in, >= 1

    [[nodiscard]] static control_command leave(std::vector<int> ranks) {
        return {control_kind::leave, std::move(ranks), 0};
    }
    [[nodiscard]] static control_command grow(int count) { return {control_kind::grow, {}, count}; }
    [[nodiscard]] static control_command accept(int count) { return {control_kind::accept, {}, count}; }
    friend bool operator==(const control_command&, const control_command&) = default;
};

// Ranks in the grammar's words, sorted and each once: {1, 3, 4, 5} is "1,3-5".
[[nodiscard]] inline std::string format_ranks(std::vector<int> ranks) {
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    std::string text;
    for (std::size_t i = 0; i < ranks.size();) {
        std::size_t last = i;
        while (last + 1 < ranks.size() && ranks[last + 1] == ranks[last] + 1) ++last;
        if (!text.empty()) text += ',';
        text += std::to_string(ranks[i]);
        if (last > i) text += '-' + std::to_string(ranks[last]);
        i = last + 1;
    }
    return text;
}

// The command a command shows in messages and logs: "leave 1,3-4", "grow 2" or "accept 2".
[[nodiscard]] inline std::string to_string(const control_command& command) {
    switch (command.kind) {
        case control_kind::leave: return "leave " + format_ranks(command.ranks);
        case control_kind::grow: return "grow " + std::to_string(command.count);
        case control_kind::accept: return "accept " + std::to_string(command.count);
    }
    return {};
}

inline constexpr std::string_view control_line_forms =
    "the valid forms are \"leave RANKS\" (RANKS: world ranks and ranges separated by commas, e.g. 1,3-4), "
    "\"grow N\" (N >= 1), \"accept N\" (N >= 1, written by a job launched with --join), a blank line and a "
    "# comment";

namespace detail {

[[nodiscard]] inline bool is_control_space(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

[[nodiscard]] inline std::string_view trim_control(std::string_view text) {
    while (!text.empty() && is_control_space(text.front())) text.remove_prefix(1);
    while (!text.empty() && is_control_space(text.back())) text.remove_suffix(1);
    return text;
}

// A whole number in decimal digits below max_control_rank_count (or nullopt).
[[nodiscard]] inline std::optional<int> control_number(std::string_view text) {
    if (text.empty() || text.size() > 6) return std::nullopt;
    int value = 0;
    for (const char c : text) {
        if (c < '0' || c > '9') return std::nullopt;
        value = value * 10 + (c - '0');
    }
    if (value > max_control_rank_count) return std::nullopt;
    return value;
}

// Parses `line` into `command`; returns why it cannot be parsed (empty when it can), or sets
// `ignored` for a blank line or a comment. Not throwing lets the watcher report a bad line at
// run time and go on.
[[nodiscard]] inline std::string parse_control_line(std::string_view line, control_command& command, bool& ignored) {
    ignored = false;
    std::string_view text = line;
    // A comment runs from '#' to the end of the line, after a command too.
    if (const auto hash = text.find('#'); hash != std::string_view::npos) text = text.substr(0, hash);
    text = trim_control(text);
    if (text.empty()) {
        ignored = true;
        return {};
    }
    std::size_t word_end = 0;
    while (word_end < text.size() && !is_control_space(text[word_end])) ++word_end;
    const std::string_view word = text.substr(0, word_end);
    const std::string_view rest = trim_control(text.substr(word_end));
    const std::string limit = std::to_string(max_control_rank_count);
    if (word == "grow" || word == "accept") {
        if (rest.empty()) return std::string(word) + " needs a count N";
        const auto count = control_number(rest);
        if (!count || *count < 1)
            return "the count \"" + std::string(rest) + "\" is not a whole number in [1, " + limit + "]";
        command = word == "grow" ? control_command::grow(*count) : control_command::accept(*count);
        return {};
    }
    if (word == "leave") {
        if (rest.empty()) return "leave needs the ranks that leave";
        std::vector<int> ranks;
        std::string_view items = rest;
        while (true) {
            const auto comma = items.find(',');
            const std::string_view item = trim_control(items.substr(0, comma));
            if (item.empty()) return "an empty item in the rank list \"" + std::string(rest) + "\"";
            const auto dash = item.find('-');
            const auto first = control_number(trim_control(item.substr(0, dash)));
            const auto last = dash == std::string_view::npos ? first : control_number(trim_control(item.substr(dash + 1)));
            if (!first || !last || *first >= max_control_rank_count || *last >= max_control_rank_count)
                return "\"" + std::string(item) + "\" is not a rank (a whole number in [0, " + limit +
                       ")) or a range of ranks A-B";
            if (*last < *first)
                return "the range \"" + std::string(item) + "\" ends before it starts (write A-B with A <= B)";
            for (int rank = *first; rank <= *last; ++rank) ranks.push_back(rank);
            if (comma == std::string_view::npos) break;
            items.remove_prefix(comma + 1);
        }
        // A rank named twice (1,1-2) leaves once.
        std::sort(ranks.begin(), ranks.end());
        ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
        command = control_command::leave(std::move(ranks));
        return {};
    }
    return "\"" + std::string(word) + "\" is not a command";
}

[[nodiscard]] inline std::string control_line_error(std::string_view line, const std::string& why) {
    std::string message = "control line \"";
    message.append(trim_control(line)).append("\" cannot be parsed: ").append(why).append("; ");
    message.append(control_line_forms);
    return message;
}

}  // namespace detail

// One line of a control file: the command, or nullopt for a blank line or a comment. Throws
// weft::error quoting the line, saying what is wrong and the valid forms.
[[nodiscard]] inline std::optional<control_command> parse_control_line(std::string_view line) {
    control_command command;
    bool ignored = false;
    if (const auto why = detail::parse_control_line(line, command, ignored); !why.empty())
        throw weft::error(detail::control_line_error(line, why));
    if (ignored) return std::nullopt;
    return command;
}

// Checks a command against the world it would change: a leave names ranks of [0, world_size)
// and leaves at least one rank; a grow or an accept stays within world_max (--world-max, resolved: the
// ranks launched when it was 0). Throws weft::error naming the value and what is valid.
inline void check_control_command(const control_command& command, int world_size, int world_max) {
    require(world_size >= 1, "world size", world_size, "must be >= 1");
    if (command.kind == control_kind::leave) {
        require(!command.ranks.empty(), "leave", std::string(), "must name at least one rank");
        for (const int rank : command.ranks)
            require(rank >= 0 && rank < world_size, "leave rank", rank,
                    "must be a rank of the world, in [0, " + std::to_string(world_size) + ")");
        std::vector<int> ranks = command.ranks;
        std::sort(ranks.begin(), ranks.end());
        ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
        require(static_cast<int>(ranks.size()) < world_size, "leave", format_ranks(ranks),
                "would leave no rank of the " + std::to_string(world_size) + "; at most " +
                    std::to_string(world_size - 1) + " may leave (to stop the run, send SIGTERM)");
        return;
    }
    require(world_max >= 1, "--world-max", world_max, "must be resolved to >= 1 (0 means the ranks launched)");
    const char* what = command.kind == control_kind::grow ? "grow" : "accept";
    require(command.count >= 1, what, command.count, "must be >= 1");
    require(static_cast<long long>(world_size) + command.count <= world_max, what, command.count,
            "would make " + std::to_string(static_cast<long long>(world_size) + command.count) +
                " ranks, past --world-max " + std::to_string(world_max) + "; at most " +
                std::to_string(std::max(0, world_max - world_size)) + " more may join");
}

// Watches a control file for appended lines. The lines already in the file when the watcher
// is made are history (an earlier run's, or written before this one started): they are
// checked, so that a file no line of which parses stops the run before anything trains, but
// they are never applied. poll() returns the commands of the complete lines appended since.
//
// A file that does not exist is created empty, so a scheduler can append to it; a path in a
// directory that does not exist is an error naming --control. Append to it (echo ... >>
// FILE): a file that shrinks has been truncated or replaced, and is read again from its start.
class control_file {
public:
    // How far a watcher has read: what another rank's watcher goes on from when the rank that
    // reads the file leaves the run (run/elastic_session.hpp).
    struct position {
        std::uintmax_t offset = 0;  // bytes of complete lines read
        long long lines = 0;
    };

    explicit control_file(std::string path) : path_(std::move(path)) {
        namespace fs = std::filesystem;
        require(!path_.empty(), "--control", path_, "must name a file");
        std::error_code ec;
        const fs::path file(path_);
        if (!fs::exists(file, ec)) {
            const fs::path directory = file.parent_path().empty() ? fs::path(".") : file.parent_path();
            require(fs::is_directory(directory, ec), "--control", path_,
                    "its directory " + directory.string() +
                        " does not exist; name a file in an existing directory (a missing file is created empty)");
            std::ofstream create(path_, std::ios::app);
            require(create.good(), "--control", path_, "cannot be created (check the directory's permissions)");
        }
        require(fs::is_regular_file(file, ec), "--control", path_, "must be a regular file (not a directory)");
        std::ifstream probe(path_, std::ios::binary);
        require(probe.good(), "--control", path_, "cannot be read (check its permissions)");
        // History: a line that cannot be parsed is an error now; none is applied.
        for (const auto& [number, line] : read_lines()) {
            control_command command;
            bool ignored = false;
            if (const auto why = detail::parse_control_line(line, command, ignored); !why.empty())
                throw weft::error("--control " + where(number) + ": " + detail::control_line_error(line, why));
        }
        // A last line still being written when the run started is history too (see poll()).
        history_pending_ = !pending_.empty();
    }

    // A watcher that goes on where another stopped (`from`, its read_position()): nothing
    // before it is history; a line after it is read as if this watcher had been there all along.
    control_file(std::string path, position from) : path_(std::move(path)), offset_(from.offset), lines_(from.lines) {}

    [[nodiscard]] position read_position() const { return {offset_ - pending_.size(), lines_}; }

    // The commands of the complete lines appended since the last call (or since the watcher
    // was made), in order. A last line without its '\n' waits for it. A line that cannot be
    // parsed is skipped with one message on stderr naming FILE:LINE and counted in
    // rejected(): a mistake in the file never stops a run that is training.
    [[nodiscard]] std::vector<control_command> poll() {
        std::vector<control_command> commands;
        for (const auto& [number, line] : read_lines()) {
            const bool history = std::exchange(history_pending_, false);
            control_command command;
            bool ignored = false;
            if (const auto why = detail::parse_control_line(line, command, ignored); !why.empty()) {
                ++rejected_;
                std::fprintf(stderr, "weft: --control %s: %s; skipped, the run goes on\n", where(number).c_str(),
                             detail::control_line_error(line, why).c_str());
                std::fflush(stderr);
                continue;
            }
            if (!ignored && !history) commands.push_back(std::move(command));
        }
        return commands;
    }

    [[nodiscard]] const std::string& path() const { return path_; }
    // Appended lines skipped because they could not be parsed.
    [[nodiscard]] std::size_t rejected() const { return rejected_; }
    // Complete lines read so far, history included.
    [[nodiscard]] long long lines() const { return lines_; }

private:
    [[nodiscard]] std::string where(long long line) const { return path_ + ":" + std::to_string(line); }

    // The complete lines (numbered from 1) that reached the file since the last read.
    std::vector<std::pair<long long, std::string>> read_lines() {
        std::vector<std::pair<long long, std::string>> complete;
        std::error_code ec;
        const auto size = std::filesystem::file_size(path_, ec);
        if (ec) return complete;  // gone for a moment (being replaced): try again at the next poll
        if (size < offset_) {
            std::fprintf(stderr, "weft: --control %s shrank (truncated or replaced): reading it again from its start\n",
                         path_.c_str());
            offset_ = 0;
            lines_ = 0;
            pending_.clear();
            history_pending_ = false;
        }
        if (size == offset_) return complete;
        std::ifstream in(path_, std::ios::binary);
        if (!in.good()) return complete;
        in.seekg(static_cast<std::streamoff>(offset_));
        std::string chunk(static_cast<std::size_t>(size - offset_), '\0');
        in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
        chunk.resize(static_cast<std::size_t>(in.gcount()));
        offset_ += chunk.size();
        pending_ += chunk;
        std::size_t start = 0;
        for (std::size_t end; (end = pending_.find('\n', start)) != std::string::npos; start = end + 1)
            complete.emplace_back(++lines_, pending_.substr(start, end - start));
        pending_.erase(0, start);
        return complete;
    }

    std::string path_;
    std::uintmax_t offset_ = 0;     // bytes read
    std::string pending_;           // a last line without its '\n' yet
    bool history_pending_ = false;  // pending_ began before the watcher was made
    long long lines_ = 0;
    std::size_t rejected_ = 0;
};

}  // namespace weft::run
