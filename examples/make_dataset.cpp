// examples/make_dataset: the small real dataset weft's GPT examples and tests train on.
// Byte-level tokens (vocab 256) of an English text every Debian machine has, the GPL-3
// licence text from base-files, written as llm.c token files: train.bin and val.bin (last 10%).
//
//   ./make_dataset --out-dir data/gpl3
//   ./make_dataset --input README.md --out-dir /tmp/readme
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "weft/run/options.hpp"
#include "weft/core/error.hpp"
#include "weft/io/token_file.hpp"

namespace {

namespace fs = std::filesystem;

// Enough that val.bin holds a few sequences: 10% of this is 100 tokens.
constexpr std::size_t minimum_tokens = 1000;

std::vector<std::uint16_t> byte_tokens(const fs::path& input) {
    std::error_code code;
    if (!fs::is_regular_file(input, code))
        throw weft::invalid_argument("--input", input.string(), "must be an existing regular file");
    std::ifstream in(input, std::ios::binary);
    if (!in) throw weft::invalid_argument("--input", input.string(), "cannot be opened for reading");
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in.bad()) throw weft::invalid_argument("--input", input.string(), "cannot be read to its end");
    weft::require(bytes.size() >= minimum_tokens, "--input", input.string(),
                  "holds " + std::to_string(bytes.size()) + " bytes; at least " + std::to_string(minimum_tokens) +
                      " are needed to split off a validation set");
    std::vector<std::uint16_t> tokens(bytes.size());
    for (std::size_t i = 0; i < bytes.size(); ++i) tokens[i] = static_cast<unsigned char>(bytes[i]);
    return tokens;
}

void make_dataset(const fs::path& input, const fs::path& out_dir) {
    const std::vector<std::uint16_t> tokens = byte_tokens(input);
    std::error_code code;
    fs::create_directories(out_dir, code);
    if (code || !fs::is_directory(out_dir))
        throw weft::invalid_argument("--out-dir", out_dir.string(),
                                     "cannot be created as a directory" + (code ? ": " + code.message() : ""));
    const std::size_t val_size = tokens.size() / 10;
    const std::size_t train_size = tokens.size() - val_size;
    const std::span<const std::uint16_t> all(tokens);
    weft::io::write_token_file(out_dir / "train.bin", all.first(train_size));
    weft::io::write_token_file(out_dir / "val.bin", all.subspan(train_size));
    std::printf("make_dataset: %zu bytes of %s -> %s (%zu tokens), %s (%zu tokens), vocab 256\n", tokens.size(),
                input.string().c_str(), (out_dir / "train.bin").string().c_str(), train_size,
                (out_dir / "val.bin").string().c_str(), val_size);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Writes a byte-level llm.c token dataset (train.bin, val.bin) from a text file"};
    std::string input = "/usr/share/common-licenses/GPL-3";
    std::string out_dir = ".";
    app.add_option("--input", input, "Text file to tokenize, one token per byte")->capture_default_str();
    app.add_option("--out-dir", out_dir, "Directory for train.bin and val.bin (created if missing)")
        ->capture_default_str();
    if (const auto exit = weft::run::parse(app, argc, argv)) return *exit;
    try {
        make_dataset(input, out_dir);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "make_dataset: %s\n", e.what());
        return 2;
    }
}
