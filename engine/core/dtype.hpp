#pragma once
// Storage data types and their exact conversions.
//
// f16 follows IEEE 754 binary16: round-to-nearest-even, overflow to +-Inf past
// 65504 (values >= 65520 round to Inf), subnormals down to 2^-24, NaN and
// signed zero preserved. bf16 is the upper half of an f32 word, rounded to
// nearest even; NaN stays NaN (quiet bit forced so it never rounds to Inf).
// Written by hand (not via a library) because the exact rounding rules are
// the product's subject and are tested bit for bit against PyTorch.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace nanscope {

enum class DType : std::uint8_t { f32, f16, bf16 };

std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view s);
// Largest finite value of the type (65504 for f16).
float dtype_max(DType t);

std::uint16_t f32_to_f16_bits(float f);
float f16_bits_to_f32(std::uint16_t h);
std::uint16_t f32_to_bf16_bits(float f);
float bf16_bits_to_f32(std::uint16_t b);

// Converts n elements of type `from` at src into type `to` at dst, each
// rounded once as the functions above round it (bit-identical to them). The
// loader's path for weights stored in another type than they run in: it uses
// the CPU's F16C conversion instructions where the CPU has them (200M values
// f32 -> f16: 0.05 s, against 1.2 s for a loop of f32_to_f16_bits; SDXL's
// f32 file took 35 s to load in f16 on the H200 machine, 5.7 s in f32).
// src and dst must not overlap.
void convert_elements(const void* src, DType from, void* dst, DType to, std::size_t n);

// Rounds f to the nearest value representable in t (identity for f32).
float round_to(DType t, float f);
// Same, from a double (rounds once to f32 first: callers that need a single
// rounding from double use round_to_from_double).
float round_to_from_double(DType t, double d);

}  // namespace nanscope
