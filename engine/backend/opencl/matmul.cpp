// MATMUL / LINEAR host side: describes the operands to the GEMM engine
// (gemm.hpp), which picks panel or tiled kernels for the device and precision.
#include "backend/opencl/gemm.hpp"
#include "backend/opencl/opencl_backend.hpp"

namespace nanscope::opencl {

void OpenClBackend::matmul(const MatmulArgs& args) {
  gemm::Problem pr;
  // A [batch, m, k] row-major.
  pr.a = {buffer(args.a), 0, args.m * args.k, args.k, 1};
  // B [k, n] (row stride n), or [n, k] when trans_b (element (k, n) at n*k + k).
  const std::int64_t b_bs = args.b_broadcast ? 0 : args.k * args.n;
  pr.b = args.trans_b ? gemm::Operand{buffer(args.b), 0, b_bs, 1, args.k}
                      : gemm::Operand{buffer(args.b), 0, b_bs, args.n, 1};
  pr.c = buffer(args.out);
  const std::int64_t ldc = args.epilogue == MatmulEpilogue::geglu ? args.n / 2 : args.n;
  pr.c_bs = args.m * ldc;
  pr.ldc = ldc;
  if (args.bias) {
    pr.bias = buffer(*args.bias);
    pr.bias_mode = gemm::kBiasCol;
  }
  pr.batch = args.batch;
  pr.m = args.m;
  pr.n = args.n;
  pr.k = args.k;
  pr.alpha = args.alpha;
  if (args.b_weight) pr.b_weight = args.b.storage();
  if (args.epilogue == MatmulEpilogue::geglu) pr.epilogue = gemm::Epilogue::geglu;
  gemm::run(*this, args.precision, pr, "MATMUL");
}

bool OpenClBackend::linear_fuses_epilogue(MatmulEpilogue e, const Precision& p, std::int64_t m, std::int64_t n,
                                          std::int64_t k, bool bias) const {
  if (e == MatmulEpilogue::none) return true;
  // The problem matmul() makes of such a LINEAR (only its layout: no buffer is looked at).
  gemm::Problem pr;
  pr.a = {nullptr, 0, 0, k, 1};
  pr.b = {nullptr, 0, 0, 1, k};
  pr.batch = 1, pr.m = m, pr.n = n, pr.k = k;
  pr.bias_mode = bias ? gemm::kBiasCol : gemm::kBiasNone;
  pr.epilogue = gemm::Epilogue::geglu;
  return gemm::fuses_epilogue(*this, p, pr);
}

void OpenClBackend::prepare_linear_weight(const Tensor& weight, const Precision& p, bool geglu) {
  if (weight.rank() != 2 || weight.dtype() != p.dtype) return;  // LINEAR converts it per call: nothing to keep
  // The B operand matmul() describes for LINEAR: weight [n, k], trans_b, shared by the batch.
  const std::int64_t n = weight.dim(0), k = weight.dim(1);
  gemm::prepare_weight(*this, p, gemm::Operand{buffer(weight), 0, 0, 1, k}, weight.storage(), k, n, "MATMUL", geglu);
}

}  // namespace nanscope::opencl
