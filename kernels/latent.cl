// latent.cl: the samplers' per-element arithmetic (pipeline/samplers.cpp), so
// that the latent stays on the device between steps.
//
// The first part is plain C that is also valid C++: the reference backend
// includes this file (backend/reference/latent_step.cpp) and runs the very same
// functions on the host, so both backends compute each value with the same
// sequence of f32 operations. Each statement is one operation of diffusers'
// tensor expressions, rounded on its own (FP_CONTRACT is off in common.cl and
// the engine builds with -ffp-contract=off); scalars (sigmas, alphas, their
// square roots) arrive as kernel arguments computed on the host, as diffusers
// computes them on 0-d tensors. Divisions are correctly rounded where the
// device supports -cl-fp32-correctly-rounded-divide-sqrt (opencl/latent_step.cpp).
//
// Which op runs is NS_LATENT_* (op_args.hpp's LatentOp, same numbers).

#define NS_LATENT_SCALE 0       // out = x / c0                      (scale_model_input)
#define NS_LATENT_MUL 1         // out = x * c0                      (init_noise_sigma)
#define NS_LATENT_CFG 2         // out = x + c0 * (m - x)            (x: uncond, m: cond)
#define NS_LATENT_EULER 3       // Euler step to sigma + dt
#define NS_LATENT_ADD_SCALED 4  // out = x + m * c0                  (ancestral noise)
#define NS_LATENT_DDIM 5        // DDIM (eta 0)
#define NS_LATENT_DPM_X0 6      // out = DPM-Solver++ data prediction
#define NS_LATENT_DPM1 7        // DPM-Solver++ first-order update
#define NS_LATENT_DPM2 8        // second order (midpoint or heun)
#define NS_LATENT_DPM3 9        // third order
#define NS_LATENT_LINCOMB 10    // out = c0*x + c1*m [+ c2*h1 [+ c3*h2]] (flag: terms, 2-4), left to right
#define NS_LATENT_X0 11         // out = the Euler samplers' x0 of (x, m): c0 sigma, c2 c_out, c3 var
#define NS_LATENT_DERIV 12      // out = (x - m) / c0                (the ODE derivative, m: x0)

#define NS_PRED_EPSILON 0
#define NS_PRED_V 1
#define NS_PRED_SAMPLE 2

// The Euler samplers' x0: eps: x - sigma*m; v: m*c_out + x/var with
// c_out = -sigma/sqrt(sigma^2+1) (c[2]) and var = sigma^2+1 (c[3]); sample: m.
static inline float ns_euler_x0(int pred, float x, float m, float sigma, float c_out, float var) {
  if (pred == NS_PRED_EPSILON) {
    const float scaled = sigma * m;
    return x - scaled;
  }
  if (pred == NS_PRED_V) {
    const float a = m * c_out;
    const float b = x / var;
    return a + b;
  }
  return m;
}

// c: sigma, dt, c_out, var. Returns the new sample, x0 through *x0.
static inline float ns_euler(int pred, float x, float m, const float* c, float* x0) {
  const float d = ns_euler_x0(pred, x, m, c[0], c[2], c[3]);
  const float diff = x - d;
  const float derivative = diff / c[0];
  const float delta = derivative * c[1];
  *x0 = d;
  return x + delta;
}

// c: sqrt(a_t), sqrt(1 - a_t), dir_coef, sqrt(a_prev), clip range; clip: clip_sample.
static inline float ns_ddim(int pred, int clip, float x, float m, const float* c, float* x0_out) {
  float x0;
  float eps;
  if (pred == NS_PRED_EPSILON) {
    const float scaled = c[1] * m;
    const float diff = x - scaled;
    x0 = diff / c[0];
    eps = m;
  } else if (pred == NS_PRED_SAMPLE) {
    x0 = m;
    const float scaled = c[0] * x0;
    const float diff = x - scaled;
    eps = diff / c[1];
  } else {
    const float ax = c[0] * x;
    const float bm = c[1] * m;
    x0 = ax - bm;
    const float am = c[0] * m;
    const float bx = c[1] * x;
    eps = am + bx;
  }
  // torch.clamp: min then max; NaN passes through.
  if (clip && x0 == x0) {
    x0 = x0 < -c[4] ? -c[4] : x0;
    x0 = c[4] < x0 ? c[4] : x0;
  }
  const float direction = c[2] * eps;
  const float kept = c[3] * x0;
  *x0_out = x0;
  return kept + direction;
}

// c: alpha_s, sigma_s (the schedule's alpha_t and sigma_t at step i).
static inline float ns_dpm_x0(int pred, float x, float m, const float* c) {
  if (pred == NS_PRED_EPSILON) {
    const float scaled = c[1] * m;
    const float diff = x - scaled;
    return diff / c[0];
  }
  if (pred == NS_PRED_V) {
    const float ax = c[0] * x;
    const float sm = c[1] * m;
    return ax - sm;
  }
  return m;
}

// c: a, b. m0: the newest data prediction.
static inline float ns_dpm1(float x, float m0, const float* c) {
  const float ax = c[0] * x;
  const float bm = c[1] * m0;
  return ax - bm;
}

// c: a, b, c, d1_coef; heun: add the correction instead of subtracting it.
static inline float ns_dpm2(int heun, float x, float m0, float m1, const float* c) {
  const float dm = m0 - m1;
  const float d1 = c[3] * dm;
  const float ax = c[0] * x;
  const float bd0 = c[1] * m0;
  const float cd1 = c[2] * d1;
  const float head = ax - bd0;
  return heun ? head + cd1 : head - cd1;
}

// c: a, b, c, d, c10, c11, c1, c2.
static inline float ns_dpm3(float x, float m0, float m1, float m2, const float* c) {
  const float dm01 = m0 - m1;
  const float dm12 = m1 - m2;
  const float d1_0 = c[4] * dm01;
  const float d1_1 = c[5] * dm12;
  const float dd = d1_0 - d1_1;
  const float c1dd = c[6] * dd;
  const float d1 = d1_0 + c1dd;
  const float d2 = c[7] * dd;
  const float ax = c[0] * x;
  const float bd0 = c[1] * m0;
  const float cd1 = c[2] * d1;
  const float dd2 = c[3] * d2;
  const float head = ax - bd0;
  const float mid = head + cd1;
  return mid - dd2;
}

// One element of any op. x, m, h1, h2: the inputs (h: older data predictions);
// returns the output, *x0 the data prediction where the op makes one.
static inline float ns_latent_element(int op, int pred, int flag, float x, float m, float h1, float h2, const float* c,
                                      float* x0) {
  *x0 = 0.0f;
  if (op == NS_LATENT_SCALE) return x / c[0];
  if (op == NS_LATENT_MUL) return x * c[0];
  if (op == NS_LATENT_CFG) {
    const float diff = m - x;
    const float scaled = c[0] * diff;
    return x + scaled;
  }
  if (op == NS_LATENT_EULER) return ns_euler(pred, x, m, c, x0);
  if (op == NS_LATENT_ADD_SCALED) {
    const float scaled = m * c[0];
    return x + scaled;
  }
  if (op == NS_LATENT_DDIM) return ns_ddim(pred, flag, x, m, c, x0);
  if (op == NS_LATENT_DPM_X0) return ns_dpm_x0(pred, x, m, c);
  if (op == NS_LATENT_DPM1) return ns_dpm1(x, m, c);
  if (op == NS_LATENT_DPM2) return ns_dpm2(flag, x, m, h1, c);
  if (op == NS_LATENT_LINCOMB) {
    const float a = c[0] * x;
    const float b = c[1] * m;
    float r = a + b;
    if (flag >= 3) {
      const float t = c[2] * h1;
      r = r + t;
    }
    if (flag >= 4) {
      const float t = c[3] * h2;
      r = r + t;
    }
    return r;
  }
  if (op == NS_LATENT_X0) return ns_euler_x0(pred, x, m, c[0], c[2], c[3]);
  if (op == NS_LATENT_DERIV) {
    const float diff = x - m;
    return diff / c[0];
  }
  return ns_dpm3(x, m, h1, h2, c);
}

#ifdef __OPENCL_VERSION__
// out[oo + i] = op(x[xo + i], m[mo + i], h1[i], h2[i]); x0[i] = the data
// prediction when has_x0. Unused inputs may be any buffer of n floats (they
// are not read by ops that do not use them). out may be x (in place).
__kernel void latent_step(int op, int pred, int flag, __global const float* x, ulong xo, __global const float* m,
                          ulong mo, __global const float* h1, __global const float* h2, __global float* out, ulong oo,
                          __global float* x0, int has_x0, float16 coef, uint n) {
  const uint i = (uint)get_global_id(0);
  if (i >= n) return;
  float c[16];
  vstore16(coef, 0, c);
  const int uses_m = op != NS_LATENT_SCALE && op != NS_LATENT_MUL;
  const float mv = uses_m ? m[mo + i] : 0.0f;
  const int lin = op == NS_LATENT_LINCOMB;
  const float h1v = (op == NS_LATENT_DPM2 || op == NS_LATENT_DPM3 || (lin && flag >= 3)) ? h1[i] : 0.0f;
  const float h2v = (op == NS_LATENT_DPM3 || (lin && flag >= 4)) ? h2[i] : 0.0f;
  float d;
  const float r = ns_latent_element(op, pred, flag, x[xo + i], mv, h1v, h2v, c, &d);
  out[oo + i] = r;
  if (has_x0) x0[i] = d;
}
#endif
