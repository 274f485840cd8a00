// Reference matmul: out[b,i,j] = alpha * sum_k a[b,i,k] * B[k,j] + bias[j].
// accumulate=f32 sums in double and rounds once; native rounds every partial
// sum to the storage dtype, k ascending, bias last (op_args.hpp).

#include <algorithm>
#include <optional>
#include <vector>

#include "backend/reference/host_access.hpp"
#include "core/error.hpp"

namespace nanscope::reference {

using detail::Floats;
using detail::round_d;
using detail::round_sum;

void ReferenceBackend::matmul(const MatmulArgs& args) {
  // linear_fuses_epilogue is false here: the ops run GEGLU on its own.
  if (args.epilogue != MatmulEpilogue::none) throw OpError("MATMUL: the reference backend applies no epilogue");
  const Floats a(args.a), b(args.b);
  std::optional<Floats> bias;
  if (args.bias) bias.emplace(*args.bias);
  detail::Store out(args.out);
  const DType t = args.out.dtype();
  const bool native = args.precision.native_accumulation();
  const std::int64_t m = args.m, n = args.n, k = args.k;
  const double alpha = args.alpha;

  // A transposed B ([n, k], torch's linear weight) is copied once to [k, n], so
  // every case runs as row updates with independent accumulators per output
  // column (a single dot-product chain per output is latency-bound). Each
  // output still sees its k terms in ascending order.
  const std::int64_t b_mats = args.b_broadcast ? 1 : args.batch;
  std::vector<float> bt;
  const float* bdata = b.data();
  if (args.trans_b) {
    bt.resize(static_cast<std::size_t>(b_mats * k * n));
    for (std::int64_t bi = 0; bi < b_mats; ++bi) {
      const float* src = b.data() + bi * n * k;
      float* dst = bt.data() + bi * k * n;
      for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t kk = 0; kk < k; ++kk) dst[kk * n + j] = src[j * k + kk];
    }
    bdata = bt.data();
  }

  detail::parallel_for(args.batch * m, static_cast<double>(n * k), [&](std::int64_t row0, std::int64_t row1) {
    std::vector<double> acc(static_cast<std::size_t>(n));
    for (std::int64_t row = row0; row < row1; ++row) {
      const std::int64_t bi = row / m;
      const float* arow = a.data() + row * k;
      const float* bmat = bdata + (args.b_broadcast ? 0 : bi * k * n);
      std::fill(acc.begin(), acc.end(), 0.0);
      double* accp = acc.data();
      for (std::int64_t kk = 0; kk < k; ++kk) {
        const double av = arow[kk];
        const float* brow = bmat + kk * n;
        if (native) {
          for (std::int64_t j = 0; j < n; ++j) accp[j] = round_sum(t, accp[j], av * double(brow[j]));
        } else {
          for (std::int64_t j = 0; j < n; ++j) accp[j] += av * double(brow[j]);
        }
      }
      for (std::int64_t j = 0; j < n; ++j) {
        const double scaled = alpha * accp[j];
        const double bv = bias ? double((*bias)[j]) : 0.0;
        // Native: alpha*acc is exact (f32 x narrow value), so round_sum rounds the exact alpha*acc + bias once.
        out.set_f32(row * n + j, static_cast<float>(native ? (bias ? round_sum(t, scaled, bv) : round_d(t, scaled))
                                                           : round_d(t, scaled + bv)));
      }
    }
  });
}

}  // namespace nanscope::reference
