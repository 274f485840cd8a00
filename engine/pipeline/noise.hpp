#pragma once
// Sources of standard normal noise for the initial latent and for ancestral
// samplers. A run draws from one source: first the initial latent, then, for
// Euler ancestral, one tensor per step — the order diffusers' pipeline uses its
// torch.Generator in.
//
// TorchCpuNoise reproduces torch.manual_seed(seed); torch.randn(n) on the CPU, bit
// for bit, so a seed gives the image diffusers gives. NanscopeNoise is our own
// counter-based generator: any element can be computed on its own, on any device.

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>

namespace nanscope::pipeline {

class NoiseSource {
 public:
  virtual ~NoiseSource() = default;
  // Fills `out` with N(0, 1) samples: the next draw of this source.
  virtual void randn(std::span<float> out) = 0;
  // "torch-cpu", "torch-cuda" or "nanscope", for reports and PNG metadata.
  virtual std::string name() const = 0;
};

// torch 1.13's CPU generator (at::CPUGeneratorImpl) and its float32 randn
// (aten/src/ATen/native/cpu/DistributionTemplates.h, normal_kernel), for one tensor
// per randn() call:
//  - The engine is MT19937 seeded with the low 32 bits of the seed (torch's own
//    mt19937 initialises state[0] = seed & 0xffffffff with the standard recurrence;
//    std::mt19937 is the same generator). manual_seed also clears the cached normal.
//  - n >= 16 (torch's normal_fill): n uniforms u = (mt() & 0xffffff) * 2^-24 are
//    drawn first, in order. Then each whole block of 16 is transformed in place by
//    Box-Muller pairing element j (radius sqrt(-2 log(1 - u_j))) with element j+8
//    (angle 2*pi*u_{j+8}): out_j = r cos(theta), out_{j+8} = r sin(theta). When n is
//    not a multiple of 16, 16 more uniforms are drawn to overwrite the last 16
//    elements (which overlap the previous block) and that block is transformed again.
//  - n < 16 (torch's scalar path): each element is one draw of
//    at::normal_distribution<double>: u1, u2 each 53 bits (two mt() words,
//    (hi << 32 | lo) & (2^53 - 1), times 2^-53), r = sqrt(-2 log(1 - u2)),
//    theta = 2 pi u1, value r cos(theta) rounded to float, and r sin(theta) is kept
//    in the generator for its next scalar draw (the cache survives across calls
//    and is not touched by the n >= 16 path).
//  - The float transform of the n >= 16 path depends on the CPU torch dispatches
//    to: on any CPU with AVX2 and FMA (AVX-512 ones included: torch's AVX-512
//    kernels are compiled with AVX2 enabled and take the same branch) torch 1.13
//    uses avx_mathfun's log256_ps and sincos256_ps (Cephes polynomials in float)
//    with theta = float(2 pi) * u (Kernel::avx2, the default); without AVX2, or
//    with ATEN_CPU_CAPABILITY=default, glibc's logf/cosf/sinf with
//    theta = float(2 pi u in double) (Kernel::scalar). The run's
//    noise.torch_cpu_kernel setting picks one; "auto" is
//    torch_cpu_kernel_of_this_cpu().
class TorchCpuNoise final : public NoiseSource {
 public:
  enum class Kernel { avx2, scalar };  // torch's AVX2 kernel; its scalar (ATEN_CPU_CAPABILITY=default) one

  explicit TorchCpuNoise(std::uint64_t seed, Kernel kernel = Kernel::avx2);
  void randn(std::span<float> out) override;
  std::string name() const override { return "torch-cpu"; }

 private:
  float uniform_float();                    // 24-bit uniform in [0, 1)
  double uniform_double();                  // 53-bit uniform in [0, 1)
  float scalar_normal();                    // at::normal_distribution<double>, with the cached second value
  void transform_block(float* data) const;  // Box-Muller of one block of 16 uniforms

  std::mt19937 engine_;
  Kernel kernel_;
  std::optional<double> next_double_normal_;
};

// The kernel torch 1.13 dispatches to on this CPU: avx2 with AVX2 and FMA
// (x86 only), else scalar.
TorchCpuNoise::Kernel torch_cpu_kernel_of_this_cpu();

// NaNscope's counter-based noise, Philox4x32-10 (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC 2011; the Random123 reference), defined as:
//  - key = (seed & 0xffffffff, seed >> 32).
//  - The d-th randn() call of the source (d = 0, 1, ...) fills element i with
//    counter = (i & 0xffffffff, i >> 32, d & 0xffffffff, d >> 32) -> Philox4x32-10
//    -> words (x0, x1, x2, x3).
//  - u1 = (((x0 << 32) | x1) >> 11) + 1) * 2^-53, in (0, 1];
//    u2 = (((x2 << 32) | x3) >> 11) * 2^-53, in [0, 1).
//  - value = float(sqrt(-2 ln u1) * cos(2 pi u2)), computed in double and rounded
//    to nearest float once.
// So the same seed gives the same latent on every device and run, any element can
// be computed without the others (a device kernel with fp64 can produce it in
// parallel; with a different libm its cos/log may differ in the last double bit,
// which changes the float only when the double lands within that bit of a float
// rounding boundary), and a draw's values do not depend on its size.
class NanscopeNoise final : public NoiseSource {
 public:
  explicit NanscopeNoise(std::uint64_t seed) : seed_(seed) {}
  void randn(std::span<float> out) override;
  std::string name() const override { return "nanscope"; }

  // Element `index` of draw `draw` for `seed`, without a source object.
  static float value(std::uint64_t seed, std::uint64_t draw, std::uint64_t index);
  // One Philox4x32-10 block: counter c, key k (exposed for the known-answer tests).
  static void philox4x32_10(const std::uint32_t c[4], const std::uint32_t k[2], std::uint32_t out[4]);

 private:
  std::uint64_t seed_;
  std::uint64_t draw_ = 0;
};

// torch.randn(shape, device="cuda") after torch.manual_seed(seed), on the CPU:
// A1111's "NV" random source (modules/rng_philox.py), reimplemented from its
// description. torch's CUDA normal kernel gives element i to GPU thread i, which
// runs curand's Philox4x32-10 with key = (seed & 0xffffffff, seed >> 32) and
// counter = (offset, 0, i, 0), where offset is the generator's Philox offset / 4:
// it starts at 0 and every randn call advances it by 1 (4 Philox outputs per
// thread). Of the four words x0..x3 the value uses x0, x1:
//   u = x0 * 2^-32 + 2^-33,  v = x1 * K + K/2,  K = float(2^-32 * 2 pi),
//   value = float(sqrt(-2 ln u) * sin(v)), computed in double (as rng_philox.py does).
// So the d-th randn() call of the source is offset d: the initial latent, then
// one draw per noise-using step, the order A1111 and diffusers use a CUDA
// generator in. Limits: this is A1111's NV computation bit for bit, not a GPU's:
// curand rounds x0 to float before scaling and computes sin with the __sincosf
// hardware approximation, which no CPU formula reproduces, so a value differs
// from torch-on-CUDA's by a few float ulps (at most 2.6e-7 on the 12 values
// A1111 documents from a GPU); and the one-element-per-thread layout holds while a
// draw has no more elements than the GPU runs threads (multiprocessors x 2048,
// e.g. 270,336 on an H100: every SD latent up to 2048x2048).
class TorchCudaNoise final : public NoiseSource {
 public:
  explicit TorchCudaNoise(std::uint64_t seed) : seed_(seed) {}
  void randn(std::span<float> out) override;
  std::string name() const override { return "torch-cuda"; }

  // Element `index` of the draw at Philox offset `offset` (0 for the first randn after manual_seed).
  static float value(std::uint64_t seed, std::uint32_t offset, std::uint32_t index);

 private:
  std::uint64_t seed_;
  std::uint32_t offset_ = 0;
};

}  // namespace nanscope::pipeline
