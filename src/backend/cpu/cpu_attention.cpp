// cpu_attention.cpp -- the CPU backend's scaled dot-product attention
// (core/backend_attention.h): a straightforward reference, one query row at
// a time with its kv_len scores in a buffer of the task. Inputs are read
// once into fp32 copies and results written back in the tensors' type.
//
// Forward: rows are independent, split among the threads. Backward: each
// task owns one (batch, key/value head) group, so dk and dv accumulate
// without sharing, in the same order on every run.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_dispatch.h"
#include "core/convert_bulk.h"
#include "math/attention.h"

namespace ampx::impl {
namespace cpu {
namespace {

std::vector<float> to_f32(const void* data, DType type, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  if (count > 0) convert_bulk(out.data(), DType::F32, data, type, count);
  return out;
}

void from_f32(const std::vector<float>& src, void* dst, DType type) {
  if (!src.empty())
    convert_bulk(dst, type, src.data(), DType::F32, static_cast<int64_t>(src.size()));
}

int mask_kind(DType t) {
  return t == DType::F32 ? math::kAttentionF32
                         : t == DType::F16 ? math::kAttentionF16 : math::kAttentionBF16;
}

// The scores of one query row, computed as backend_attention.h defines them.
class RowScores {
 public:
  RowScores(const AttentionShape& s, const float* q, const float* k)
      : s_(s), q_(q), k_(k), kind_(mask_kind(s.mask_type)), key_(math::dropout_key(s.seed)) {}

  // scores[j] for row i of head h in batch b; returns their maximum.
  float compute(int64_t b, int64_t h, int64_t i, float* scores) const {
    const int64_t g = h / (s_.heads / s_.kv_heads);
    const float* qi = q_ + ((b * s_.heads + h) * s_.q_len + i) * s_.head_dim;
    const float* kg = k_ + (b * s_.kv_heads + g) * s_.kv_len * s_.head_dim;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < s_.kv_len; ++j) {
      float score = -std::numeric_limits<float>::infinity();
      if (!(s_.causal && j > i)) {
        const float* kj = kg + j * s_.head_dim;
        float dot = 0.0f;
        for (int64_t d = 0; d < s_.head_dim; ++d) dot += qi[d] * kj[d];
        score = dot * s_.scale;
        if (s_.mask)
          score += math::attention_load(s_.mask, kind_,
                                        b * s_.mask_strides[0] + h * s_.mask_strides[1] +
                                            i * s_.mask_strides[2] + j * s_.mask_strides[3]);
      }
      scores[j] = score;
      if (score > max) max = score;
    }
    return max;
  }

  // The dropout factor z_j of the row's score j (1 without dropout).
  float dropout(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (!s_.dropout) return 1.0f;
    const uint64_t n = static_cast<uint64_t>(((b * s_.heads + h) * s_.q_len + i) * s_.kv_len + j);
    return math::attention_dropout_factor(key_, s_.offset, n, s_.threshold, s_.dropout_scale);
  }

 private:
  const AttentionShape& s_;
  const float* q_;
  const float* k_;
  int kind_;
  math::PhiloxKey key_;
};

}  // namespace

void attention_forward(ThreadPool& pool, const AttentionShape& s, const void* q_data,
                       const void* k_data, const void* v_data, DType type, void* out_data,
                       float* lse) {
  const std::vector<float> q = to_f32(q_data, type, s.batch * s.heads * s.q_len * s.head_dim);
  const std::vector<float> k = to_f32(k_data, type, s.batch * s.kv_heads * s.kv_len * s.head_dim);
  const std::vector<float> v = to_f32(v_data, type, s.batch * s.kv_heads * s.kv_len * s.value_dim);
  std::vector<float> out(static_cast<size_t>(s.batch * s.heads * s.q_len * s.value_dim));
  const RowScores scores_of(s, q.data(), k.data());
  const int64_t rows = s.batch * s.heads * s.q_len;
  const int64_t group = s.heads / s.kv_heads;
  const int64_t grain = items_per_task(1 << 16, std::max<int64_t>(1, s.kv_len * s.head_dim));
  pool.parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> p(static_cast<size_t>(s.kv_len));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r % s.q_len, h = (r / s.q_len) % s.heads, b = r / (s.q_len * s.heads);
      float* o = out.data() + r * s.value_dim;
      const float max = scores_of.compute(b, h, i, p.data());
      if (max == -std::numeric_limits<float>::infinity()) {
        if (lse) lse[r] = max;  // every key masked: out stays 0
        continue;
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < s.kv_len; ++j) sum += (p[j] = std::exp(p[j] - max));
      if (lse) lse[r] = max + std::log(sum);
      const float* vg = v.data() + (b * s.kv_heads + h / group) * s.kv_len * s.value_dim;
      for (int64_t j = 0; j < s.kv_len; ++j) {
        const float pj = p[j] / sum * scores_of.dropout(b, h, i, j);
        if (pj == 0.0f) continue;
        const float* vj = vg + j * s.value_dim;
        for (int64_t d = 0; d < s.value_dim; ++d) o[d] += pj * vj[d];
      }
    }
  });
  from_f32(out, out_data, type);
}

void attention_backward(ThreadPool& pool, const AttentionShape& s, const void* q_data,
                        const void* k_data, const void* v_data, const void* out_data,
                        const void* dout_data, const float* lse, DType type, void* dq_data,
                        void* dk_data, void* dv_data) {
  const int64_t q_count = s.batch * s.heads * s.q_len * s.head_dim;
  const int64_t o_count = s.batch * s.heads * s.q_len * s.value_dim;
  const std::vector<float> q = to_f32(q_data, type, q_count);
  const std::vector<float> k = to_f32(k_data, type, s.batch * s.kv_heads * s.kv_len * s.head_dim);
  const std::vector<float> v = to_f32(v_data, type, s.batch * s.kv_heads * s.kv_len * s.value_dim);
  const std::vector<float> out = to_f32(out_data, type, o_count);
  const std::vector<float> dout = to_f32(dout_data, type, o_count);
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  const RowScores scores_of(s, q.data(), k.data());
  const int64_t group = s.heads / s.kv_heads;
  pool.parallel_for(s.batch * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> p(static_cast<size_t>(s.kv_len));
    for (int64_t bg = begin; bg < end; ++bg) {
      const int64_t b = bg / s.kv_heads, g = bg % s.kv_heads;
      const float* kg = k.data() + bg * s.kv_len * s.head_dim;
      const float* vg = v.data() + bg * s.kv_len * s.value_dim;
      float* dkg = dk.data() + bg * s.kv_len * s.head_dim;
      float* dvg = dv.data() + bg * s.kv_len * s.value_dim;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        for (int64_t i = 0; i < s.q_len; ++i) {
          const int64_t r = (b * s.heads + h) * s.q_len + i;
          if (lse[r] == -std::numeric_limits<float>::infinity()) continue;
          scores_of.compute(b, h, i, p.data());
          const float* qi = q.data() + r * s.head_dim;
          const float* oi = out.data() + r * s.value_dim;
          const float* doi = dout.data() + r * s.value_dim;
          float* dqi = dq.data() + r * s.head_dim;
          float delta = 0.0f;
          for (int64_t d = 0; d < s.value_dim; ++d) delta += doi[d] * oi[d];
          for (int64_t j = 0; j < s.kv_len; ++j) {
            const float pj = std::exp(p[j] - lse[r]);
            if (pj == 0.0f) continue;
            const float z = scores_of.dropout(b, h, i, j);
            const float* vj = vg + j * s.value_dim;
            float dp = 0.0f;
            for (int64_t d = 0; d < s.value_dim; ++d) dp += doi[d] * vj[d];
            const float ds = pj * (dp * z - delta) * s.scale;
            const float pz = pj * z;
            float* dvj = dvg + j * s.value_dim;
            for (int64_t d = 0; d < s.value_dim; ++d) dvj[d] += pz * doi[d];
            const float* kj = kg + j * s.head_dim;
            float* dkj = dkg + j * s.head_dim;
            for (int64_t d = 0; d < s.head_dim; ++d) {
              dqi[d] += ds * kj[d];
              dkj[d] += ds * qi[d];
            }
          }
        }
      }
    }
  });
  from_f32(dq, dq_data, type);
  from_f32(dk, dk_data, type);
  from_f32(dv, dv_data, type);
}

}  // namespace cpu
}  // namespace ampx::impl
