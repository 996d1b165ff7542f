// Reading and writing the safetensors format (Hugging Face), so checkpoints open in
// the Python ecosystem: 8-byte little-endian header length N, N bytes of JSON header
// naming each tensor's dtype, shape and byte range in the data section, then the data.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/core/dtype.hpp"
#include "weft/core/error.hpp"
#include "weft/io/atomic_file.hpp"

namespace weft::io {

static_assert(std::endian::native == std::endian::little,
              "weft's safetensors I/O copies little-endian data as is: a big-endian host would need byte swaps");

// One tensor of a safetensors file; data holds its elements in row-major, little-endian order.
struct tensor_record {
    std::string name;
    weft::dtype type = weft::dtype::f32;
    std::vector<std::int64_t> shape;
    std::vector<std::byte> data;

    [[nodiscard]] std::int64_t element_count() const {
        std::int64_t count = 1;
        for (std::int64_t d : shape) count *= d;
        return count;
    }
};

using safetensors_metadata = std::map<std::string, std::string>;

namespace detail {

// Larger headers are refused before allocating, as the reference implementation does.
inline constexpr std::uint64_t safetensors_max_header_size = 100'000'000;

[[nodiscard]] inline std::optional<weft::dtype> parse_safetensors_dtype(std::string_view name) {
    for (weft::dtype type : {weft::dtype::f32, weft::dtype::f64, weft::dtype::bf16, weft::dtype::i32, weft::dtype::u16})
        if (to_string(type) == name) return type;
    return std::nullopt;
}

[[nodiscard]] inline std::string shape_text(std::span<const std::int64_t> shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i > 0) text.append(", ");
        text.append(std::to_string(shape[i]));
    }
    return text.append("]");
}

// Element count times element size, or nullopt if a dimension is negative or it overflows.
[[nodiscard]] inline std::optional<std::uint64_t> byte_size(std::span<const std::int64_t> shape, weft::dtype type) {
    std::uint64_t size = size_of(type);
    for (std::int64_t d : shape) {
        if (d < 0) return std::nullopt;
        if (d != 0 && size > UINT64_MAX / std::uint64_t(d)) return std::nullopt;
        size *= std::uint64_t(d);
    }
    return size;
}

}  // namespace detail

// The contents of a safetensors file, tensors in file order, looked up by name.
class safetensors_file {
public:
    safetensors_file() = default;
    safetensors_file(std::filesystem::path path, std::vector<tensor_record> tensors, safetensors_metadata metadata)
        : path_(std::move(path)), tensors_(std::move(tensors)), metadata_(std::move(metadata)) {
        for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
    }

    [[nodiscard]] const std::filesystem::path& path() const { return path_; }
    [[nodiscard]] std::span<const tensor_record> tensors() const { return tensors_; }
    [[nodiscard]] const safetensors_metadata& metadata() const { return metadata_; }
    [[nodiscard]] bool contains(std::string_view name) const { return index_.contains(std::string(name)); }

    [[nodiscard]] const tensor_record& find(std::string_view name) const {
        const auto it = index_.find(std::string(name));
        if (it == index_.end())
            throw invalid_argument("tensor name", name, "is not in safetensors file \"" + path_.string() + "\"");
        return tensors_[it->second];
    }

private:
    std::filesystem::path path_;
    std::vector<tensor_record> tensors_;
    safetensors_metadata metadata_;
    std::unordered_map<std::string, std::size_t> index_;
};

// Writes the tensors (data in the order given) atomically. The header is padded with
// spaces to a multiple of 8 bytes, as the Python package does, so data stays aligned.
inline void write_safetensors(const std::filesystem::path& path, std::span<const tensor_record> tensors,
                              const safetensors_metadata& metadata = {}) {
    nlohmann::json header = nlohmann::json::object();
    std::uint64_t offset = 0;
    for (const tensor_record& tensor : tensors) {
        require(!tensor.name.empty(), "tensor name", tensor.name, "must not be empty");
        require(tensor.name != "__metadata__", "tensor name", tensor.name, "is reserved by the safetensors format");
        require(!header.contains(tensor.name), "tensor name", tensor.name, "appears twice");
        const auto size = detail::byte_size(tensor.shape, tensor.type);
        require(size.has_value(), "shape of " + tensor.name, detail::shape_text(tensor.shape),
                "must have non-negative dimensions");
        require(*size == tensor.data.size(), "data size of " + tensor.name, tensor.data.size(),
                "must be " + std::to_string(*size) + " bytes for shape " + detail::shape_text(tensor.shape) +
                    " of " + std::string(to_string(tensor.type)));
        header[tensor.name] = {{"dtype", std::string(to_string(tensor.type))},
                               {"shape", tensor.shape},
                               {"data_offsets", {offset, offset + *size}}};
        offset += *size;
    }
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');

    write_file_atomically(path, [&](atomic_file& file) {
        std::byte length[8];
        for (int i = 0; i < 8; ++i) length[i] = std::byte((std::uint64_t(text.size()) >> (8 * i)) & 0xff);
        file.write(length);
        file.write(std::as_bytes(std::span(text.data(), text.size())));
        for (const tensor_record& tensor : tensors) file.write(tensor.data);
    });
}

// Parses a whole safetensors file held in memory; `path` only names it in errors.
[[nodiscard]] inline safetensors_file parse_safetensors(std::span<const std::byte> bytes,
                                                       const std::filesystem::path& path) {
    const auto fail = [&](const std::string& what) -> error {
        return invalid_argument("safetensors file", path.string(), what);
    };
    if (bytes.size() < 8)
        throw fail("is " + std::to_string(bytes.size()) + " bytes long, shorter than the 8-byte header length");
    std::uint64_t header_size = 0;
    for (int i = 0; i < 8; ++i) header_size |= std::uint64_t(bytes[std::size_t(i)]) << (8 * i);
    if (header_size > bytes.size() - 8)
        throw fail("has a header length of " + std::to_string(header_size) + " bytes, beyond the end of the file (" +
                   std::to_string(bytes.size() - 8) + " bytes follow the length)");
    if (header_size > detail::safetensors_max_header_size)
        throw fail("has a header length of " + std::to_string(header_size) + " bytes, more than the limit of " +
                   std::to_string(detail::safetensors_max_header_size));
    const auto* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
    const std::string_view header_text(header_begin, std::size_t(header_size));
    if (header_text.empty() || header_text.front() != '{')
        throw fail("has a header that is not a JSON object (it must start with '{')");

    nlohmann::json header;
    try {
        header = nlohmann::json::parse(header_text);
    } catch (const nlohmann::json::exception& e) {
        throw fail(std::string("has a header that is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) throw fail("has a header that is not a JSON object");

    const std::span<const std::byte> data = bytes.subspan(8 + std::size_t(header_size));
    safetensors_metadata metadata;
    struct located {
        std::uint64_t begin, end;
        tensor_record record;
    };
    std::vector<located> found;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") {
            if (!entry.is_object()) throw fail("has a __metadata__ entry that is not an object of strings");
            for (const auto& [key, value] : entry.items()) {
                if (!value.is_string())
                    throw fail("has __metadata__ \"" + key + "\" that is not a string (it is " + value.dump() + ")");
                metadata.emplace(key, value.get<std::string>());
            }
            continue;
        }
        const std::string where = "has tensor \"" + name + "\" ";
        if (!entry.is_object()) throw fail(where + "whose entry is not an object");
        for (const char* key : {"dtype", "shape", "data_offsets"})
            if (!entry.contains(key)) throw fail(where + "without \"" + key + "\"");
        const auto& type_json = entry["dtype"];
        if (!type_json.is_string()) throw fail(where + "whose dtype is not a string");
        const auto type = detail::parse_safetensors_dtype(type_json.get<std::string>());
        if (!type)
            throw fail(where + "of unknown dtype " + type_json.dump() + " (weft reads F32, F64, BF16, I32, U16)");
        tensor_record record{name, *type, {}, {}};
        const auto& shape_json = entry["shape"];
        if (!shape_json.is_array()) throw fail(where + "whose shape is not an array");
        for (const auto& d : shape_json) {
            if (!d.is_number_unsigned() || d.get<std::uint64_t>() > std::uint64_t(INT64_MAX))
                throw fail(where + "whose shape " + shape_json.dump() + " is not a list of non-negative integers");
            record.shape.push_back(d.get<std::int64_t>());
        }
        const auto& offsets = entry["data_offsets"];
        if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
            !offsets[1].is_number_unsigned())
            throw fail(where + "whose data_offsets " + offsets.dump() + " are not two non-negative integers");
        const std::uint64_t begin = offsets[0].get<std::uint64_t>();
        const std::uint64_t end = offsets[1].get<std::uint64_t>();
        if (begin > end || end > data.size())
            throw fail(where + "with data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                       "] outside the data section of " + std::to_string(data.size()) + " bytes");
        const auto expected = detail::byte_size(record.shape, record.type);
        if (!expected || *expected != end - begin)
            throw fail(where + "with data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] (" +
                       std::to_string(end - begin) + " bytes), but shape " + detail::shape_text(record.shape) +
                       " of " + std::string(to_string(record.type)) + " needs " +
                       (expected ? std::to_string(*expected) : std::string("more")) + " bytes");
        found.push_back({begin, end, std::move(record)});
    }

    // The data section must be covered exactly once: a gap or trailing bytes mean the
    // file is not what the header says (a truncated or spliced file).
    std::sort(found.begin(), found.end(), [](const located& a, const located& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::uint64_t covered = 0;
    std::string previous;
    for (const located& tensor : found) {
        if (tensor.begin < covered)
            throw fail("has tensors \"" + previous + "\" and \"" + tensor.record.name + "\" whose data overlap (\"" +
                       tensor.record.name + "\" begins at " + std::to_string(tensor.begin) + ", before " +
                       std::to_string(covered) + ")");
        if (tensor.begin > covered)
            throw fail("has a gap of " + std::to_string(tensor.begin - covered) + " bytes in its data before tensor \"" +
                       tensor.record.name + "\"");
        covered = tensor.end;
        previous = tensor.record.name;
    }
    if (covered != data.size())
        throw fail("has " + std::to_string(data.size() - covered) + " bytes of trailing data after its last tensor");

    std::vector<tensor_record> tensors;
    tensors.reserve(found.size());
    for (located& tensor : found) {
        const auto* first = data.data() + tensor.begin;
        tensor.record.data.assign(first, first + (tensor.end - tensor.begin));
        tensors.push_back(std::move(tensor.record));
    }
    return safetensors_file(path, std::move(tensors), std::move(metadata));
}

[[nodiscard]] inline safetensors_file read_safetensors(const std::filesystem::path& path) {
    std::error_code code;
    if (!std::filesystem::is_regular_file(path, code))
        throw invalid_argument("safetensors file", path.string(), "does not exist or is not a regular file");
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw invalid_argument("safetensors file", path.string(), "cannot be opened for reading");
    const std::streamoff size = in.tellg();
    if (size < 0) throw invalid_argument("safetensors file", path.string(), "cannot be read (is it a file?)");
    std::vector<std::byte> bytes(static_cast<std::size_t>(size));
    in.seekg(0);
    if (!in.read(reinterpret_cast<char*>(bytes.data()), size))
        throw invalid_argument("safetensors file", path.string(), "cannot be read to its end");
    return parse_safetensors(bytes, path);
}

}  // namespace weft::io
