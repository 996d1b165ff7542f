// How a process joins a running elastic job, and the port it joins through.
//
// Two ways in, one world out (the job's ranks first, then the joiners):
// - Started by the job's `grow N` (MPI_Comm_spawn): the parent connection, merged.
// - Launched separately, `mpirun -np N train_gpt <the job's options> --join CONTROL`, where
//   CONTROL is the job's --control file: the job's rank 0 publishes an MPI port next to it
//   (CONTROL.port, published_port below); the joiners' rank 0 reads it, appends `accept N` to
//   CONTROL, and the joiners connect (MPI_Comm_connect) while the job accepts them
//   (MPI_Comm_accept, run/joiner_start.hpp) on a thread of its own as it trains on.
//   Two separately launched MPI jobs meet only through a name server they share: Open MPI 4
//   runs `ompi-server --report-uri FILE`, and both mpiruns take `--ompi-server file:FILE`
//   (docs/elastic.md).
#pragma once

#include "weft/comm/mpi.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/run/join_handshake.hpp"

namespace weft::run {

[[nodiscard]] inline std::string published_port_path(const std::string& control_file) {
    return control_file + ".port";
}

// Rank 0 of an elastic job with --control: an MPI port open for joiners launched separately,
// its name in CONTROL.port (written to a temporary name and renamed, so a reader never sees
// half of it) for as long as the job runs. Where the MPI cannot open a port, it says so once and
// the job runs on without one (a grow still works).
class published_port {
public:
    explicit published_port(const std::string& control_file) : path_(published_port_path(control_file)) {
        char name[MPI_MAX_PORT_NAME] = {};
        if (MPI_Open_port(MPI_INFO_NULL, name) != MPI_SUCCESS) {
            std::fprintf(stderr,
                         "elastic | this MPI opens no port (MPI_Open_port failed): jobs launched with --join cannot "
                         "join; `grow N` still works\n");
            return;
        }
        const std::string temporary = path_ + ".tmp." + std::to_string(::getpid());
        {
            std::ofstream out(temporary, std::ios::trunc);
            out << name << '\n';
            out.flush();
            if (!out.good()) {
                std::fprintf(stderr, "elastic | cannot write %s: jobs launched with --join cannot join\n",
                             temporary.c_str());
                MPI_Close_port(name);
                return;
            }
        }
        std::error_code ec;
        std::filesystem::rename(temporary, path_, ec);
        if (ec) {
            std::fprintf(stderr, "elastic | cannot rename %s to %s (%s): jobs launched with --join cannot join\n",
                         temporary.c_str(), path_.c_str(), ec.message().c_str());
            std::filesystem::remove(temporary, ec);
            MPI_Close_port(name);
            return;
        }
        name_ = name;
    }
    published_port(const published_port&) = delete;
    published_port& operator=(const published_port&) = delete;
    // The job is over: no joiner may find the port any more.
    ~published_port() {
        if (name_.empty()) return;
        std::error_code ec;
        std::filesystem::remove(path_, ec);
        MPI_Close_port(name_.data());
    }

    // Empty where no port could be opened.
    [[nodiscard]] const std::string& name() const { return name_; }
    [[nodiscard]] const std::string& path() const { return path_; }

private:
    std::string path_;
    std::string name_;
};

namespace detail {

// --join's value from the command line, read before MPI_Init (the options are parsed after).
[[nodiscard]] inline std::optional<std::string> join_option(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        const std::string_view argument(argv[i]);
        if (argument == "--join" && i + 1 < argc) return std::string(argv[i + 1]);
        if (argument.rfind("--join=", 0) == 0) return std::string(argument.substr(7));
    }
    return std::nullopt;
}

// The port name the job published, waiting up to `patience` for it to appear.
[[nodiscard]] inline std::string read_published_port(const std::string& control_file,
                                                     std::chrono::milliseconds patience) {
    const std::string path = published_port_path(control_file);
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (true) {
        std::ifstream in(path);
        std::string name;
        if (in.good() && std::getline(in, name) && !name.empty()) return name;
        if (std::chrono::steady_clock::now() >= deadline)
            throw invalid_argument("--join", control_file,
                                   "no running job published a port at " + path + " within " +
                                       std::to_string(patience.count() / 1000) +
                                       " s: name the --control file of a job started with --elastic --control, "
                                       "under an MPI that opens ports (docs/elastic.md)");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

// Appends `line` to the control file in one write (O_APPEND), so that lines other writers
// append at the same moment never interleave with it.
inline void append_control_line(const std::string& control_file, const std::string& line) {
    const int fd = ::open(control_file.c_str(), O_WRONLY | O_APPEND);
    require(fd >= 0, "--join", control_file,
            std::string("cannot be opened for appending (") + std::strerror(errno) + ")");
    const std::string text = line + "\n";
    const ssize_t written = ::write(fd, text.data(), text.size());
    const int error_number = errno;
    ::close(fd);
    require(written == static_cast<ssize_t>(text.size()), "--join", control_file,
            std::string("cannot be appended to (") + std::strerror(error_number) + ")");
}

// The joiners' side of --join, collective over MPI_COMM_WORLD of the joining job.
[[nodiscard]] inline MPI_Comm connect_to_running_job(const std::string& control_file,
                                                     std::chrono::milliseconds patience) {
    int size = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::string port;
    std::string failure;
    if (rank == 0) {
        try {
            port = read_published_port(control_file, patience);
            append_control_line(control_file, "accept " + std::to_string(size) + "  # --join, pid " +
                                                  std::to_string(::getpid()));
        } catch (const std::exception& e) {
            failure = e.what();
        }
    }
    // Every joiner learns whether rank 0 found the job, so that none waits in the connect alone.
    int found = failure.empty() ? 1 : 0;
    MPI_Bcast(&found, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (found == 0) {
        if (rank == 0) throw weft::error(unprefixed(failure));
        throw weft::error("--join: rank 0 of this job found no running job to join (its message says why)");
    }
    MPI_Comm inter = MPI_COMM_NULL;
    comm::detail::mpi_check(MPI_Comm_connect(port.c_str(), MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter),
                            "MPI_Comm_connect (--join)");
    return inter;
}

}  // namespace detail

// Under mpirun, for a process that joins a running elastic job (started by its grow, or
// launched with --join CONTROL): the world of the job's ranks and the joiners (the job's
// first), with the connection closed; nullopt for a process that starts a run of its own.
[[nodiscard]] inline std::optional<comm::mpi> joined_world(const std::optional<std::string>& join_control) {
    MPI_Comm parent = MPI_COMM_NULL;
    comm::detail::mpi_check(MPI_Comm_get_parent(&parent), "MPI_Comm_get_parent");
    if (parent == MPI_COMM_NULL && !join_control) return std::nullopt;
    // A joiner launched separately waits this long for the job's port to appear.
    constexpr std::chrono::seconds patience{60};
    MPI_Comm inter = parent != MPI_COMM_NULL ? parent : detail::connect_to_running_job(*join_control, patience);
    MPI_Comm merged = MPI_COMM_NULL;
    comm::detail::mpi_check(MPI_Intercomm_merge(inter, 1, &merged), "MPI_Intercomm_merge");
    // Only the merged world is used; a connection left open makes Open MPI 5's MPI_Finalize crash.
    MPI_Comm_disconnect(&inter);
    detail::joined_running_world.store(true);
    return comm::mpi(merged, true);
}

}  // namespace weft::run
