// Scalar reference dequantizers, written straight from the formulas in MODELS.md §2.
#include <cstring>
#include <string>

#include "cera/error.h"
#include "common/fp16.h"
#include "format/quant.h"
#include "format/quant_blocks.h"
#include "format/quant_unpack.h"

namespace cera::quant {
namespace {

float h2f(uint16_t h) { return f16_to_f32(h); }

void deq_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * float((b[i].qs[j] & 0xF) - 8);
      y[j + 16] = d * float((b[i].qs[j] >> 4) - 8);
    }
  }
}

void deq_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d), m = h2f(b[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * float(b[i].qs[j] & 0xF) + m;
      y[j + 16] = d * float(b[i].qs[j] >> 4) + m;
    }
  }
}

uint32_t load_qh(const uint8_t* qh) {
  return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}

void deq_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d);
    const uint32_t qh = load_qh(b[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (b[i].qs[j] & 0xF) | int((qh >> j) & 1) << 4;
      const int hi = (b[i].qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
      y[j] = d * float(lo - 16);
      y[j + 16] = d * float(hi - 16);
    }
  }
}

void deq_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d), m = h2f(b[i].m);
    const uint32_t qh = load_qh(b[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (b[i].qs[j] & 0xF) | int((qh >> j) & 1) << 4;
      const int hi = (b[i].qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
      y[j] = d * float(lo) + m;
      y[j + 16] = d * float(hi) + m;
    }
  }
}

void deq_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < 32; ++j) y[j] = d * float(b[i].qs[j]);
  }
}

void deq_q8_1(const BlockQ8_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < 32; ++j) y[j] = d * float(b[i].qs[j]);
  }
}

void deq_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    for (int n = 0; n < 2; ++n) {
      const uint8_t* q = b[i].qs + 32 * n;
      for (int j = 0; j < 4; ++j) {
        const int shift = 2 * j;
        const uint8_t a = b[i].scales[8 * n + 2 * j], c = b[i].scales[8 * n + 2 * j + 1];
        for (int l = 0; l < 16; ++l) {
          y[128 * n + 32 * j + l] = d * float(a & 15) * float((q[l] >> shift) & 3) - dmin * float(a >> 4);
          y[128 * n + 32 * j + 16 + l] =
              d * float(c & 15) * float((q[l + 16] >> shift) & 3) - dmin * float(c >> 4);
        }
      }
    }
    y += kQK_K;
  }
}

void deq_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d);
    int8_t sc[16];
    unpack_scales_q3k(b[i].scales, sc);
    for (int n = 0; n < 2; ++n) {
      const uint8_t* q = b[i].qs + 32 * n;
      for (int j = 0; j < 4; ++j) {
        const int shift = 2 * j;
        const uint8_t m = uint8_t(1u << (4 * n + j));
        for (int l = 0; l < 32; ++l) {
          const int v = ((q[l] >> shift) & 3) - ((b[i].hmask[l] & m) ? 0 : 4);
          y[128 * n + 32 * j + l] = d * float(sc[8 * n + 2 * j + l / 16]) * float(v);
        }
      }
    }
    y += kQK_K;
  }
}

void deq_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    uint8_t sc[8], mn[8];
    unpack_scales_k4(b[i].scales, sc, mn);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = b[i].qs + 32 * c;
      for (int l = 0; l < 32; ++l) {
        y[64 * c + l] = d * float(sc[2 * c]) * float(q[l] & 0xF) - dmin * float(mn[2 * c]);
        y[64 * c + 32 + l] = d * float(sc[2 * c + 1]) * float(q[l] >> 4) - dmin * float(mn[2 * c + 1]);
      }
    }
    y += kQK_K;
  }
}

void deq_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    uint8_t sc[8], mn[8];
    unpack_scales_k4(b[i].scales, sc, mn);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = b[i].qs + 32 * c;
      for (int l = 0; l < 32; ++l) {
        const int lo = (q[l] & 0xF) + 16 * ((b[i].qh[l] >> (2 * c)) & 1);
        const int hi = (q[l] >> 4) + 16 * ((b[i].qh[l] >> (2 * c + 1)) & 1);
        y[64 * c + l] = d * float(sc[2 * c]) * float(lo) - dmin * float(mn[2 * c]);
        y[64 * c + 32 + l] = d * float(sc[2 * c + 1]) * float(hi) - dmin * float(mn[2 * c + 1]);
      }
    }
    y += kQK_K;
  }
}

void deq_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d);
    for (int n = 0; n < 2; ++n) {
      const uint8_t* ql = b[i].ql + 64 * n;
      const uint8_t* qh = b[i].qh + 32 * n;
      const int8_t* s = b[i].scales + 8 * n;
      float* out = y + 128 * n;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        out[l] = d * float(s[is + 0]) * float(q1);
        out[l + 32] = d * float(s[is + 2]) * float(q2);
        out[l + 64] = d * float(s[is + 4]) * float(q3);
        out[l + 96] = d * float(s[is + 6]) * float(q4);
      }
    }
    y += kQK_K;
  }
}

void deq_q8_k(const BlockQ8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K)
    for (int j = 0; j < kQK_K; ++j) y[j] = b[i].d * float(b[i].qs[j]);
}

void check_multiple(GgmlType type, int64_t n, int64_t blk) {
  if (n % blk != 0)
    throw Error(ErrorCode::InvalidArgument, std::string(ggml_type_name(type)) + ": row of " +
                                                std::to_string(n) + " elements is not a multiple of " +
                                                std::to_string(blk));
}

}  // namespace

bool can_dequantize(GgmlType type) {
  switch (type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0:
    case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q8_1: case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K:
    case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::Q8_K:
      return true;
    default:
      return false;
  }
}

void dequantize_row_ref(GgmlType type, const void* src, float* dst, int64_t n) {
  if (!can_dequantize(type))
    throw Error(ErrorCode::Unsupported, "cannot dequantize tensor type " + std::string(ggml_type_name(type)));
  const int64_t blk = ggml_traits(type).block_elems;
  check_multiple(type, n, blk);
  const int64_t nb = n / blk;
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case GgmlType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case GgmlType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case GgmlType::Q4_0: return deq_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case GgmlType::Q4_1: return deq_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
    case GgmlType::Q5_0: return deq_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
    case GgmlType::Q5_1: return deq_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb);
    case GgmlType::Q8_0: return deq_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case GgmlType::Q8_1: return deq_q8_1(static_cast<const BlockQ8_1*>(src), dst, nb);
    case GgmlType::Q2_K: return deq_q2_k(static_cast<const BlockQ2_K*>(src), dst, nb);
    case GgmlType::Q3_K: return deq_q3_k(static_cast<const BlockQ3_K*>(src), dst, nb);
    case GgmlType::Q4_K: return deq_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
    case GgmlType::Q5_K: return deq_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
    case GgmlType::Q6_K: return deq_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
    case GgmlType::Q8_K: return deq_q8_k(static_cast<const BlockQ8_K*>(src), dst, nb);
    default: break;
  }
}

}  // namespace cera::quant
