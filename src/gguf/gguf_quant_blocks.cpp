#include "finetune/gguf/gguf_quant_blocks.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include <c10/util/Half.h>

#include "finetune/gguf/gguf_quantize.h"

namespace finetune {
namespace {

constexpr int kQk = 32;    // QK4_0 = QK5_0 = QK5_1
constexpr int kQkK = 256;  // QK_K
constexpr float kGroupMaxEps = 1e-15f;

float fp16_to_fp32(uint16_t bits) {
  c10::Half half;
  half.x = bits;
  return static_cast<float>(half);
}

void put_u16(std::string& out, uint16_t value) { out.append(reinterpret_cast<const char*>(&value), 2); }

int nearest_int(float fval) {
  const float val = fval + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

float make_qx_quants(int n, int nmax, const float* x, int8_t* L, int rmse_type) {  // qw = NULL
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  auto weight = [&](int i) {
    return rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1 : rmse_type == 3 ? std::fabs(x[i]) : std::sqrt(std::fabs(x[i]));
  };
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = weight(i);
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = weight(i);
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                       float rmin, float rdelta, int nstep) {  // use_mad = false
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

// The 6-bit scales/mins, d and dmin of one Q4_K/Q5_K super-block (the part both share), then the
// quants L (0..nmax) each sub-block's scale and min give.
struct KScales {
  uint8_t scales[12] = {};
  uint16_t d = 0, dmin = 0;
};

KScales k_scales(const float* x, int nmax, float rmin, int nstep, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], mins[kQkK / 32], scales[kQkK / 32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQkK / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  KScales out;
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kQkK / 32; ++j) {
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      out.scales[j] = ls;
      out.scales[j + 4] = lm;
    } else {
      out.scales[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
      out.scales[j - 4] |= ((ls >> 4) << 6);
      out.scales[j - 0] |= ((lm >> 4) << 6);
    }
  }
  out.d = fp32_to_fp16_bits(max_scale / 63.f);
  out.dmin = fp32_to_fp16_bits(max_min / 63.f);
  for (int j = 0; j < kQkK / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, out.scales, &sc, &m);
    const float d = fp16_to_fp32(out.d) * sc;
    if (!d) continue;
    const float dm = fp16_to_fp32(out.dmin) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
  return out;
}

void put_k_header(std::string& out, const KScales& k) {
  put_u16(out, k.d);
  put_u16(out, k.dmin);
  out.append(reinterpret_cast<const char*>(k.scales), 12);
}

// Absolute maximum's signed value (the first of equal magnitudes), as q4_0/q5_0 pick it.
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQk; j++) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

}  // namespace

void encode_q4_0(const float* x, int64_t count, std::string& out) {
  for (int64_t i = 0; i < count / kQk; ++i, x += kQk) {
    const float d = signed_absmax(x) / -8;
    const float id = d ? 1.0f / d : 0.0f;
    put_u16(out, fp32_to_fp16_bits(d));
    for (int j = 0; j < kQk / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[kQk / 2 + j] * id;
      const auto xi0 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f))));
      const auto xi1 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f))));
      out.push_back(static_cast<char>(xi0 | (xi1 << 4)));
    }
  }
}

void encode_q5_0(const float* x, int64_t count, std::string& out) {
  for (int64_t i = 0; i < count / kQk; ++i, x += kQk) {
    const float d = signed_absmax(x) / -16;
    const float id = d ? 1.0f / d : 0.0f;
    put_u16(out, fp32_to_fp16_bits(d));
    uint32_t qh = 0;
    char qs[kQk / 2];
    for (int j = 0; j < kQk / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[kQk / 2 + j] * id;
      const auto xi0 = static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x0 + 16.5f))));
      const auto xi1 = static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x1 + 16.5f))));
      qs[j] = static_cast<char>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + kQk / 2);
    }
    out.append(reinterpret_cast<const char*>(&qh), 4);
    out.append(qs, kQk / 2);
  }
}

void encode_q5_1(const float* x, int64_t count, std::string& out) {
  for (int64_t i = 0; i < count / kQk; ++i, x += kQk) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQk; j++) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    put_u16(out, fp32_to_fp16_bits(d));
    put_u16(out, fp32_to_fp16_bits(min));
    uint32_t qh = 0;
    char qs[kQk / 2];
    for (int j = 0; j < kQk / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[kQk / 2 + j] - min) * id;
      const auto xi0 = static_cast<uint8_t>(x0 + 0.5f);
      const auto xi1 = static_cast<uint8_t>(x1 + 0.5f);
      qs[j] = static_cast<char>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + kQk / 2);
    }
    out.append(reinterpret_cast<const char*>(&qh), 4);
    out.append(qs, kQk / 2);
  }
}

void encode_q4_k(const float* x, int64_t count, std::string& out) {
  uint8_t L[kQkK];
  for (int64_t i = 0; i < count / kQkK; ++i, x += kQkK) {
    put_k_header(out, k_scales(x, 15, -1.f, 20, L));
    uint8_t q[kQkK / 2];
    for (int j = 0, o = 0; j < kQkK; j += 64, o += 32) {
      for (int l = 0; l < 32; ++l) q[o + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
    out.append(reinterpret_cast<const char*>(q), sizeof q);
  }
}

void encode_q5_k(const float* x, int64_t count, std::string& out) {
  uint8_t L[kQkK];
  for (int64_t i = 0; i < count / kQkK; ++i, x += kQkK) {
    put_k_header(out, k_scales(x, 31, -0.5f, 15, L));
    uint8_t qh[kQkK / 8] = {};
    uint8_t ql[kQkK / 2];
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0, o = 0; n < kQkK; n += 64, o += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[o + j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 <<= 2;
      m2 <<= 2;
    }
    out.append(reinterpret_cast<const char*>(qh), sizeof qh);
    out.append(reinterpret_cast<const char*>(ql), sizeof ql);
  }
}

void encode_q6_k(const float* x, int64_t count, std::string& out) {
  int8_t L[kQkK];
  float scales[kQkK / 16];
  for (int64_t i = 0; i < count / kQkK; ++i, x += kQkK) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQkK / 16; ++ib) {
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
      scales[ib] = scale;
      if (std::fabs(scale) > max_abs_scale) {
        max_abs_scale = std::fabs(scale);
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      out.append(kQkK / 2 + kQkK / 4 + kQkK / 16, '\0');
      put_u16(out, fp32_to_fp16_bits(0.f));
      continue;
    }
    const float iscale = -128.f / max_scale;
    const uint16_t d_bits = fp32_to_fp16_bits(1 / iscale);
    int8_t block_scales[kQkK / 16];
    for (int ib = 0; ib < kQkK / 16; ++ib) {
      block_scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    }
    for (int j = 0; j < kQkK / 16; ++j) {
      const float d = fp16_to_fp32(d_bits) * block_scales[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = nearest_int(x[16 * j + ii] / d);
        l = std::max(-32, std::min(31, l));
        L[16 * j + ii] = static_cast<int8_t>(l + 32);
      }
    }
    uint8_t ql[kQkK / 2], qh[kQkK / 4];
    for (int j = 0, lo = 0, ho = 0; j < kQkK; j += 128, lo += 64, ho += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[lo + l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[lo + l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[ho + l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                          ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
    out.append(reinterpret_cast<const char*>(ql), sizeof ql);
    out.append(reinterpret_cast<const char*>(qh), sizeof qh);
    out.append(reinterpret_cast<const char*>(block_scales), sizeof block_scales);
    put_u16(out, d_bits);
  }
}

}  // namespace finetune
