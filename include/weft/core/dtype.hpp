// Element types weft stores and moves, as runtime values: the flat buffers, the
// wire format of communicators and checkpoint files all describe their data by dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace weft {

enum class dtype : std::uint8_t { f32, f64, bf16, i32, u16 };

[[nodiscard]] constexpr std::size_t size_of(dtype type) {
    switch (type) {
        case dtype::f32: return 4;
        case dtype::f64: return 8;
        case dtype::bf16: return 2;
        case dtype::i32: return 4;
        case dtype::u16: return 2;
    }
    return 0;
}

// The names safetensors uses, so files written by weft open in the Python ecosystem.
[[nodiscard]] constexpr std::string_view to_string(dtype type) {
    switch (type) {
        case dtype::f32: return "F32";
        case dtype::f64: return "F64";
        case dtype::bf16: return "BF16";
        case dtype::i32: return "I32";
        case dtype::u16: return "U16";
    }
    return "unknown";
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr dtype value = dtype::f32; };
template <> struct dtype_of<double> { static constexpr dtype value = dtype::f64; };
template <> struct dtype_of<std::int32_t> { static constexpr dtype value = dtype::i32; };
template <> struct dtype_of<std::uint16_t> { static constexpr dtype value = dtype::u16; };
template <class T> inline constexpr dtype dtype_of_v = dtype_of<T>::value;

}  // namespace weft
