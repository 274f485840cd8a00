// Reference multi-head attention, three implementations with the semantics
// of op_args.hpp (AttentionArgs):
// - bmm: the [sq, sk] score matrix of one (batch, head) is materialised, then
//   softmax row by row, probabilities rounded to dtype, then P.v.
// - sliced: the same arithmetic on slice_size (batch, head) pairs at a time;
//   equal to bmm bit for bit by construction (only the buffer differs).
// - fused: one pass per query row with an online softmax (running max m, sum
//   l, output o) over keys in ascending order; never stores scores.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/reference/host_access.hpp"

namespace nanscope::reference {

using detail::round_d;
using detail::round_sum;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct AttentionView {
  const AttentionArgs& a;
  detail::Floats q, k, v;
  DType t;
  bool native_acc, native_sm;

  explicit AttentionView(const AttentionArgs& args)
      : a(args),
        q(args.q),
        k(args.k),
        v(args.v),
        t(args.out.dtype()),
        native_acc(args.precision.native_accumulation()),
        native_sm(args.precision.native_softmax()) {}

  const float* q_row(std::int64_t b, std::int64_t h, std::int64_t i) const {
    return q.data() + ((b * a.sq + i) * a.heads + h) * a.d;
  }
  const float* k_row(std::int64_t b, std::int64_t h, std::int64_t j) const {
    return k.data() + ((b * a.sk + j) * a.heads + h) * a.d;
  }
  const float* v_row(std::int64_t b, std::int64_t h, std::int64_t j) const {
    return v.data() + ((b * a.sk + j) * a.heads + h) * a.dv;
  }
  std::int64_t out_index(std::int64_t b, std::int64_t h, std::int64_t i) const {
    return ((b * a.sq + i) * a.heads + h) * a.dv;
  }
  // Keys query i may see.
  std::int64_t keys(std::int64_t i) const { return a.causal ? std::min(i + 1, a.sk) : a.sk; }

  // Scores of query row qr against keys [j0, j1) into dst[0 .. j1 - j0).
  // s = round(scale * q.k): q.k per accumulate; with native accumulation the
  // product is a matmul output (rounded to dtype); otherwise the score is kept
  // in f32, or stored in dtype when softmax=native. Four keys at a time, each
  // with its own chain (the arithmetic per score is unchanged).
  void scores(const float* qr, std::int64_t b, std::int64_t h, std::int64_t j0, std::int64_t j1, float* dst) const {
    std::int64_t j = j0;
    for (; j + 4 <= j1; j += 4) {
      const float* k0 = k_row(b, h, j);
      const float* k1 = k_row(b, h, j + 1);
      const float* k2 = k_row(b, h, j + 2);
      const float* k3 = k_row(b, h, j + 3);
      double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
      if (native_acc) {
        for (std::int64_t c = 0; c < a.d; ++c) {
          const double qv = qr[c];
          s0 = round_sum(t, s0, qv * double(k0[c]));
          s1 = round_sum(t, s1, qv * double(k1[c]));
          s2 = round_sum(t, s2, qv * double(k2[c]));
          s3 = round_sum(t, s3, qv * double(k3[c]));
        }
      } else {
        for (std::int64_t c = 0; c < a.d; ++c) {
          const double qv = qr[c];
          s0 += qv * double(k0[c]);
          s1 += qv * double(k1[c]);
          s2 += qv * double(k2[c]);
          s3 += qv * double(k3[c]);
        }
      }
      dst[j - j0] = finish_score(s0);
      dst[j - j0 + 1] = finish_score(s1);
      dst[j - j0 + 2] = finish_score(s2);
      dst[j - j0 + 3] = finish_score(s3);
    }
    for (; j < j1; ++j) {
      const float* kr = k_row(b, h, j);
      double acc = 0.0;
      if (native_acc) {
        for (std::int64_t c = 0; c < a.d; ++c) acc = round_sum(t, acc, double(qr[c]) * double(kr[c]));
      } else {
        for (std::int64_t c = 0; c < a.d; ++c) acc += double(qr[c]) * double(kr[c]);
      }
      dst[j - j0] = finish_score(acc);
    }
  }

  float finish_score(double acc) const {
    if (native_acc) return static_cast<float>(round_d(t, double(a.scale) * acc));  // scale * acc is exact
    return static_cast<float>(round_d(native_sm ? t : DType::f32, double(a.scale) * acc));
  }
};

// One query row of bmm/sliced: softmax of its materialised scores, then P.v.
void finish_row(const AttentionView& av, std::int64_t b, std::int64_t h, std::int64_t i, const float* scores,
                std::vector<double>& p, std::vector<double>& acc, detail::Store& out) {
  const std::int64_t n = av.keys(i);
  detail::softmax_row(scores, n, av.t, av.native_sm, p.data());
  std::fill(acc.begin(), acc.end(), 0.0);
  for (std::int64_t j = 0; j < n; ++j) {
    const double pj = round_d(av.t, p[static_cast<std::size_t>(j)]);  // probabilities in dtype before P.v
    const float* vr = av.v_row(b, h, j);
    if (av.native_acc) {
      for (std::int64_t c = 0; c < av.a.dv; ++c) acc[c] = round_sum(av.t, acc[c], pj * double(vr[c]));
    } else {
      for (std::int64_t c = 0; c < av.a.dv; ++c) acc[c] += pj * double(vr[c]);
    }
  }
  const std::int64_t o = av.out_index(b, h, i);
  for (std::int64_t c = 0; c < av.a.dv; ++c) out.set(o + c, acc[static_cast<std::size_t>(c)]);
}

// bmm and sliced: score matrices for `count` (batch*head) pairs starting at bh0.
void materialised_slice(const AttentionView& av, std::int64_t bh0, std::int64_t count, std::vector<float>& scores,
                        detail::Store& out) {
  const auto& a = av.a;
  const std::int64_t rows = count * a.sq;
  scores.assign(static_cast<std::size_t>(rows * a.sk), -std::numeric_limits<float>::infinity());
  detail::parallel_for(rows, static_cast<double>(a.sk * a.d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t bh = bh0 + r / a.sq, i = r % a.sq;
      const std::int64_t b = bh / a.heads, h = bh % a.heads;
      const float* qr = av.q_row(b, h, i);
      av.scores(qr, b, h, 0, av.keys(i), scores.data() + r * a.sk);
    }
  });
  detail::parallel_for(rows, static_cast<double>(a.sk * (a.dv + 30)), [&](std::int64_t r0, std::int64_t r1) {
    std::vector<double> p(static_cast<std::size_t>(a.sk)), acc(static_cast<std::size_t>(a.dv));
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t bh = bh0 + r / a.sq, i = r % a.sq;
      finish_row(av, bh / a.heads, bh % a.heads, i, scores.data() + r * a.sk, p, acc, out);
    }
  });
}

void fused(const AttentionView& av, detail::Store& out) {
  const auto& a = av.a;
  const DType t = av.t;
  detail::parallel_for(a.batch * a.heads * a.sq, static_cast<double>(a.sk * (a.d + a.dv + 30)),
                       [&](std::int64_t r0, std::int64_t r1) {
                         std::vector<double> o(static_cast<std::size_t>(a.dv));
                         constexpr std::int64_t kBlock = 16;
                         float block[kBlock];  // scores of the next keys, consumed in order
                         for (std::int64_t r = r0; r < r1; ++r) {
                           const std::int64_t bh = r / a.sq, i = r % a.sq;
                           const std::int64_t b = bh / a.heads, h = bh % a.heads;
                           const float* qr = av.q_row(b, h, i);
                           double m = -kInf, l = 0.0;
                           std::fill(o.begin(), o.end(), 0.0);
                           const std::int64_t n = av.keys(i);
                           for (std::int64_t j = 0; j < n; ++j) {
                             if (j % kBlock == 0) av.scores(qr, b, h, j, std::min(n, j + kBlock), block);
                             const double s = block[j % kBlock];
                             const double m_new = detail::nan_max(m, s);
                             if (m_new == -kInf) continue;  // nothing but -Inf scores so far: they weigh 0
                             const float* vr = av.v_row(b, h, j);
                             if (av.native_sm) {
                               // Every update in the storage dtype, each product exact before its one rounding.
                               const double corr = round_d(t, std::exp(round_d(t, m - m_new)));
                               const double p = round_d(t, std::exp(round_d(t, s - m_new)));
                               l = round_sum(t, l * corr, p);
                               for (std::int64_t c = 0; c < a.dv; ++c)
                                 o[c] = round_sum(t, o[c] * corr, p * double(vr[c]));
                             } else {
                               const double corr = std::exp(m - m_new);
                               const double p = std::exp(s - m_new);
                               l = l * corr + p;
                               for (std::int64_t c = 0; c < a.dv; ++c) o[c] = o[c] * corr + p * double(vr[c]);
                             }
                             m = m_new;
                           }
                           const std::int64_t oi = av.out_index(b, h, i);
                           for (std::int64_t c = 0; c < a.dv; ++c) out.set(oi + c, o[static_cast<std::size_t>(c)] / l);
                         }
                       });
}

}  // namespace

void ReferenceBackend::attention(const AttentionArgs& args) {
  const AttentionView av(args);
  detail::Store out(args.out);
  const std::int64_t pairs = args.batch * args.heads;
  switch (args.config.impl) {
    case AttentionImpl::fused: fused(av, out); return;
    case AttentionImpl::bmm:
    case AttentionImpl::sliced: {
      const std::int64_t slice =
          args.config.impl == AttentionImpl::bmm ? 1 : std::max<std::int64_t>(1, args.config.slice_size);
      std::vector<float> scores;
      for (std::int64_t bh0 = 0; bh0 < pairs; bh0 += slice) {
        materialised_slice(av, bh0, std::min(slice, pairs - bh0), scores, out);
      }
      return;
    }
  }
}

}  // namespace nanscope::reference
