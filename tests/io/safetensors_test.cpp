// The safetensors reader and writer: files round-trip, a file laid out by hand as
// the specification (and the Python package) lays it out reads back, and every kind
// of corruption is refused with a message naming the file and what is wrong.
#include "weft/io/safetensors.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "scratch_dir.hpp"

namespace fs = std::filesystem;
using weft::dtype;
using weft::io::parse_safetensors;
using weft::io::read_safetensors;
using weft::io::tensor_record;
using weft::io::write_safetensors;

using weft_test::scratch_dir;

namespace {

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
    std::vector<std::byte> out(values.size() * sizeof(T));
    std::memcpy(out.data(), values.data(), out.size());
    return out;
}

// A file as the format defines it: u64 little-endian header length, header, data.
std::vector<std::byte> make_file(const std::string& header, const std::vector<std::byte>& data) {
    std::vector<std::byte> file;
    for (int i = 0; i < 8; ++i) file.push_back(std::byte((std::uint64_t(header.size()) >> (8 * i)) & 0xff));
    for (char c : header) file.push_back(std::byte(c));
    file.insert(file.end(), data.begin(), data.end());
    return file;
}

std::vector<std::byte> read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> chars{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::vector<std::byte> out(chars.size());
    std::memcpy(out.data(), chars.data(), chars.size());
    return out;
}

void write_bytes(const fs::path& path, const std::vector<std::byte>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

const std::vector<std::byte> eight_bytes = bytes_of(std::vector<float>{1.0f, 2.0f});

auto parse(const std::vector<std::byte>& bytes) { return parse_safetensors(bytes, "bad.safetensors"); }

}  // namespace

TEST_CASE("tensors and metadata round-trip through a safetensors file") {
    scratch_dir dir("st_roundtrip");
    const std::vector<tensor_record> tensors = {
        {"wte.weight", dtype::f32, {3, 2}, bytes_of(std::vector<float>{1, -2, 3.5f, 4, 5, 6e-7f})},
        {"h.0.ln_1.bias", dtype::f64, {2}, bytes_of(std::vector<double>{0.25, -1e300})},
        {"ids", dtype::i32, {2, 1}, bytes_of(std::vector<std::int32_t>{-7, 1 << 30})},
        {"tokens", dtype::u16, {3}, bytes_of(std::vector<std::uint16_t>{0, 50256, 65535})},
        {"half", dtype::bf16, {1}, bytes_of(std::vector<std::uint16_t>{0x3f80})},
        {"scalar", dtype::f32, {}, bytes_of(std::vector<float>{42})},
        {"empty", dtype::f32, {0, 4}, {}},
    };
    const fs::path path = dir.path / "model.safetensors";
    write_safetensors(path, tensors, {{"format", "pt"}, {"step", "10"}});

    const auto file = read_safetensors(path);
    REQUIRE(file.tensors().size() == tensors.size());
    for (const tensor_record& expected : tensors) {
        const tensor_record& got = file.find(expected.name);
        CHECK(got.type == expected.type);
        CHECK(got.shape == expected.shape);
        CHECK(got.data == expected.data);
    }
    CHECK(file.tensors()[0].name == "wte.weight");  // file order is the order written
    CHECK(file.metadata() == weft::io::safetensors_metadata{{"format", "pt"}, {"step", "10"}});
    CHECK(file.find("scalar").element_count() == 1);
    CHECK(file.path() == path);

    // The data section starts 8-byte aligned, as the Python package writes it.
    const auto raw = read_bytes(path);
    std::uint64_t n = 0;
    std::memcpy(&n, raw.data(), 8);
    CHECK(n % 8 == 0);
    CHECK(char(raw[8]) == '{');
}

TEST_CASE("a hand-built file following the specification reads back") {
    // Header keys in a different order from the data, metadata first, padding spaces:
    // what the Python package writes for {"b": zeros(2, dtype=int32), "a": [[1, 2], [3, 4]]}.
    const std::string header =
        R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},)"
        R"("b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}   )";
    std::vector<std::byte> data(8, std::byte(0));
    for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) {
        std::uint32_t bits = 0;
        std::memcpy(&bits, &v, 4);
        for (int i = 0; i < 4; ++i) data.push_back(std::byte((bits >> (8 * i)) & 0xff));  // little-endian
    }
    const auto file = parse_safetensors(make_file(header, data), "hand.safetensors");
    REQUIRE(file.tensors().size() == 2);
    CHECK(file.tensors()[0].name == "b");  // tensors come in data order
    const tensor_record& a = file.find("a");
    CHECK(a.type == dtype::f32);
    CHECK(a.shape == std::vector<std::int64_t>{2, 2});
    std::vector<float> values(4);
    std::memcpy(values.data(), a.data.data(), 16);
    CHECK(values == std::vector<float>{1, 2, 3, 4});
    CHECK(file.find("b").data == std::vector<std::byte>(8, std::byte(0)));
    CHECK(file.metadata().at("format") == "pt");
    CHECK_THROWS_WITH(file.find("c"), Catch::Contains("\"c\"") && Catch::Contains("hand.safetensors"));
}

TEST_CASE("a file shorter than the header length field is refused") {
    CHECK_THROWS_WITH(parse({std::byte(1), std::byte(0)}),
                      Catch::Contains("bad.safetensors") && Catch::Contains("shorter than the 8-byte header length"));
}

TEST_CASE("a header length beyond the end of the file is refused") {
    auto bytes = make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight_bytes);
    bytes[7] = std::byte(0x01);  // header length 2^56 + ...
    CHECK_THROWS_WITH(parse(bytes), Catch::Contains("beyond the end of the file"));
}

TEST_CASE("a truncated file is refused") {
    scratch_dir dir("st_truncated");
    const fs::path path = dir.path / "t.safetensors";
    const std::vector<tensor_record> tensors = {{"w", dtype::f32, {4}, bytes_of(std::vector<float>{1, 2, 3, 4})}};
    write_safetensors(path, tensors);
    const auto whole = read_bytes(path);
    // Cut inside the data: the offsets point past the end.
    write_bytes(path, std::vector<std::byte>(whole.begin(), whole.end() - 3));
    CHECK_THROWS_WITH(read_safetensors(path), Catch::Contains(path.string()) &&
                                                  Catch::Contains("outside the data section of 13 bytes"));
    // Cut inside the header.
    write_bytes(path, std::vector<std::byte>(whole.begin(), whole.begin() + 20));
    CHECK_THROWS_WITH(read_safetensors(path), Catch::Contains("beyond the end of the file"));
    // Cut inside the length.
    write_bytes(path, std::vector<std::byte>(whole.begin(), whole.begin() + 5));
    CHECK_THROWS_WITH(read_safetensors(path), Catch::Contains("5 bytes long"));
}

TEST_CASE("a corrupted header is refused as invalid JSON") {
    const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    for (std::size_t at : {std::size_t(1), std::size_t(5), header.size() - 1}) {
        auto bytes = make_file(header, eight_bytes);
        bytes[8 + at] = std::byte(char(bytes[8 + at]) ^ 0x5a);
        CHECK_THROWS_WITH(parse(bytes), Catch::Contains("bad.safetensors") && Catch::Contains("not valid JSON"));
    }
    CHECK_THROWS_WITH(parse(make_file("[1, 2]", {})), Catch::Contains("not a JSON object"));
}

TEST_CASE("malformed tensor entries are refused") {
    const auto with = [](const std::string& entry) { return parse(make_file(R"({"a":)" + entry + "}", eight_bytes)); };
    CHECK_THROWS_WITH(with(R"({"dtype":"Q7","shape":[2],"data_offsets":[0,8]})"),
                      Catch::Contains("\"a\"") && Catch::Contains("unknown dtype \"Q7\""));
    CHECK_THROWS_WITH(with(R"({"shape":[2],"data_offsets":[0,8]})"), Catch::Contains("without \"dtype\""));
    CHECK_THROWS_WITH(with(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"),
                      Catch::Contains("non-negative integers"));
    CHECK_THROWS_WITH(with(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"),
                      Catch::Contains("not two non-negative integers"));
    CHECK_THROWS_WITH(with("7"), Catch::Contains("not an object"));
}

TEST_CASE("offsets out of range or inconsistent with the shape are refused") {
    const auto with = [](const std::string& header) { return parse(make_file(header, eight_bytes)); };
    CHECK_THROWS_WITH(with(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})"),
                      Catch::Contains("outside the data section of 8 bytes"));
    CHECK_THROWS_WITH(with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})"),
                      Catch::Contains("outside the data section"));
    CHECK_THROWS_WITH(with(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"),
                      Catch::Contains("shape [3] of F32 needs 12 bytes"));
    CHECK_THROWS_WITH(with(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})"),
                      Catch::Contains("needs 16 bytes"));
}

TEST_CASE("overlapping tensors, gaps and trailing data are refused") {
    const std::vector<std::byte> data(16, std::byte(0));
    CHECK_THROWS_WITH(parse(make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                      data)),
                      Catch::Contains("\"a\" and \"b\" whose data overlap"));
    CHECK_THROWS_WITH(parse(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                                      data)),
                      Catch::Contains("gap of 4 bytes") && Catch::Contains("\"b\""));
    CHECK_THROWS_WITH(parse(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data)),
                      Catch::Contains("8 bytes of trailing data"));
}

TEST_CASE("metadata must map strings to strings") {
    CHECK_THROWS_WITH(parse(make_file(R"({"__metadata__":{"step":3}})", {})),
                      Catch::Contains("__metadata__ \"step\" that is not a string"));
    CHECK(parse(make_file(R"({"__metadata__":{"k":"v"}})", {})).metadata().at("k") == "v");
}

TEST_CASE("writing refuses records that do not describe their data") {
    scratch_dir dir("st_write_errors");
    const fs::path path = dir.path / "w.safetensors";
    const auto write = [&](std::vector<tensor_record> tensors) { write_safetensors(path, tensors); };
    CHECK_THROWS_WITH(write({{"a", dtype::f32, {3}, eight_bytes}}), Catch::Contains("must be 12 bytes"));
    CHECK_THROWS_WITH(write({{"a", dtype::f32, {2}, eight_bytes}, {"a", dtype::f32, {2}, eight_bytes}}),
                      Catch::Contains("appears twice"));
    CHECK_THROWS_WITH(write({{"__metadata__", dtype::f32, {2}, eight_bytes}}), Catch::Contains("reserved"));
    CHECK_THROWS_WITH(write({{"a", dtype::f32, {-1}, {}}}), Catch::Contains("non-negative"));
    CHECK_FALSE(fs::exists(path));
    CHECK_THROWS_WITH(read_safetensors(dir.path / "missing.safetensors"), Catch::Contains("does not exist"));
}
