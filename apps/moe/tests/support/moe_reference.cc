// The tests' reference model (moe_reference.h). Compiled with -ffp-contract=off.
#include "moe_reference.h"

#include <cmath>
#include <cstring>

namespace fabric_lib::moe::testing {
namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Rng {
  uint64_t s;
  uint64_t next() { return s = splitmix(s); }
  float uniform() { return static_cast<float>(next() >> 40) / static_cast<float>(1ull << 24); }  // [0, 1)
  uint32_t below(uint32_t n) { return static_cast<uint32_t>(next() % n); }
};

Rng rng_for(uint64_t seed, uint64_t step, uint64_t token, uint64_t field) {
  return Rng{splitmix(splitmix(splitmix(seed) ^ step * 0x100000001B3ull) ^ (token << 8) ^ field)};
}

}  // namespace

Routing routing_of_step(uint64_t step) { return static_cast<Routing>(step % 4); }

const char* routing_name(Routing r) {
  switch (r) {
    case Routing::kRandom: return "random";
    case Routing::kHot: return "hot";
    case Routing::kSparse: return "sparse";
    case Routing::kSkewed: return "skewed";
  }
  return "?";
}

float fp8_e4m3_to_float(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 0xF, man = b & 7;
  float v;
  if (exp == 0xF && man == 7) return std::nanf("");
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man) / 8.0f, -6);
  } else {
    v = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  }
  return sign ? -v : v;
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TokenBatch make_tokens(const MoeConfig& c, uint64_t seed, uint64_t step, uint32_t first, uint32_t count) {
  TokenBatch b;
  const uint32_t H = c.hidden_dim, S = c.hidden_dim_scale, K = c.experts_per_token, E = c.num_experts;
  const size_t in = dtype_size(c.in_dtype);
  b.tokens = count;
  b.x.resize(size_t{count} * H * in);
  b.scales.resize(size_t{count} * S);
  b.indices.resize(size_t{count} * K);
  b.weights.resize(size_t{count} * K);
  const Routing routing = routing_of_step(step);
  for (uint32_t t = 0; t < count; ++t) {
    const uint64_t g = first + t;
    Rng rx = rng_for(seed, step, g, 1);
    uint8_t* x = b.x.data() + size_t{t} * H * in;
    for (uint32_t h = 0; h < H; ++h) {
      if (c.in_dtype == DType::kFp8E4M3) {
        uint8_t v = static_cast<uint8_t>(rx.next());
        if ((v & 0x7F) == 0x7F) v ^= 1;  // no NaN encodings
        x[h] = v;
      } else if (c.in_dtype == DType::kFp32) {
        const float v = rx.uniform() * 4.0f - 2.0f;
        std::memcpy(x + 4 * h, &v, 4);
      } else {
        const uint16_t v = to_bf16(rx.uniform() * 4.0f - 2.0f);
        std::memcpy(x + 2 * h, &v, 2);
      }
    }
    for (uint32_t i = 0; i < S; ++i) b.scales[size_t{t} * S + i] = 0.5f + 1.5f * rx.uniform();
    Rng ri = rng_for(seed, step, g, 2);
    uint32_t* idx = b.indices.data() + size_t{t} * K;
    const uint32_t hot = static_cast<uint32_t>((step * 7) % E);
    for (uint32_t k = 0; k < K; ++k) {
      for (int attempt = 0;; ++attempt) {
        uint32_t e = ri.below(E);  // after 32 duplicates (few sparse experts): any expert
        if (attempt < 32) {
          switch (routing) {
            case Routing::kHot: e = (hot + k) % E; break;
            case Routing::kSparse: e = (ri.below(E / 4 == 0 ? 1 : E / 4) * 4 + static_cast<uint32_t>(step)) % E; break;
            case Routing::kSkewed: e = k == 0 ? 0 : ri.below(E); break;
            default: break;
          }
        }
        bool dup = false;
        for (uint32_t j = 0; j < k; ++j) dup |= idx[j] == e;
        if (!dup) {
          idx[k] = e;
          break;
        }
      }
    }
    Rng rw = rng_for(seed, step, g, 3);
    float sum = 0.0f;
    for (uint32_t k = 0; k < K; ++k) {
      b.weights[size_t{t} * K + k] = 0.05f + rw.uniform();
      sum = sum + b.weights[size_t{t} * K + k];
    }
    for (uint32_t k = 0; k < K; ++k) b.weights[size_t{t} * K + k] = b.weights[size_t{t} * K + k] / sum;
  }
  return b;
}

float token_value(const MoeConfig& c, const uint8_t* x, const float* scales, uint32_t h) {
  const uint32_t H = c.hidden_dim, S = c.hidden_dim_scale;
  float v;
  if (c.in_dtype == DType::kFp8E4M3) {
    v = fp8_e4m3_to_float(x[h]);
  } else if (c.in_dtype == DType::kFp32) {
    std::memcpy(&v, x + 4 * h, 4);
  } else {
    uint16_t u;
    std::memcpy(&u, x + 2 * h, 2);
    v = from_bf16(u);
  }
  if (S > 0) v = v * scales[h / ((H + S - 1) / S)];
  return v;
}

void expert_apply(const MoeConfig& c, uint32_t expert, const uint8_t* x, const float* scales, uint8_t* out) {
  const float factor = 1.0f + static_cast<float>(expert % 7) / 8.0f;
  for (uint32_t h = 0; h < c.hidden_dim; ++h) {
    const float y = token_value(c, x, scales, h) * factor;
    if (c.out_dtype == DType::kFp32) {
      std::memcpy(out + 4 * h, &y, 4);
    } else {
      const uint16_t u = to_bf16(y);
      std::memcpy(out + 2 * h, &u, 2);
    }
  }
}

DispatchExpect reference_dispatch(const MoeConfig& c, uint32_t rank, const std::vector<TokenBatch>& all) {
  const uint32_t L = c.num_experts / c.world_size, K = c.experts_per_token, H = c.hidden_dim, S = c.hidden_dim_scale;
  const size_t xb = size_t{H} * dtype_size(c.in_dtype);
  DispatchExpect d;
  d.counts.assign(L, 0);
  d.pad_off.assign(L, 0);
  // Gather (expert, source, token, k) in the reference order.
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> rows(L);  // (source, token)
  for (uint32_t e = 0; e < L; ++e) {
    const uint32_t ge = rank * L + e;
    for (uint32_t s = 0; s < all.size(); ++s) {
      for (uint32_t t = 0; t < all[s].tokens; ++t) {
        for (uint32_t k = 0; k < K; ++k) {
          if (all[s].indices[size_t{t} * K + k] == ge) rows[e].push_back({s, t});
        }
      }
    }
  }
  uint32_t total = 0;
  for (uint32_t e = 0; e < L; ++e) {
    d.pad_off[e] = total;
    d.counts[e] = static_cast<int32_t>(rows[e].size());
    total += static_cast<uint32_t>((rows[e].size() + c.expert_padding - 1) / c.expert_padding * c.expert_padding);
  }
  d.rows = total;
  d.x.assign(size_t{total} * xb, 0);
  d.scales.assign(size_t{total} * S, 0.0f);
  d.expert_of.assign(total, UINT32_MAX);
  for (uint32_t e = 0; e < L; ++e) {
    for (size_t j = 0; j < rows[e].size(); ++j) {
      const auto [s, t] = rows[e][j];
      const size_t row = d.pad_off[e] + j;
      std::memcpy(d.x.data() + row * xb, all[s].x.data() + size_t{t} * xb, xb);
      std::memcpy(d.scales.data() + row * S, all[s].scales.data() + size_t{t} * S, size_t{S} * 4);
      d.expert_of[row] = e;
    }
  }
  return d;
}

std::vector<uint8_t> reference_combine(const MoeConfig& c, const TokenBatch& b) {
  const uint32_t H = c.hidden_dim, K = c.experts_per_token, S = c.hidden_dim_scale;
  const size_t xb = size_t{H} * dtype_size(c.in_dtype), ob = size_t{H} * dtype_size(c.out_dtype);
  std::vector<uint8_t> out(size_t{b.tokens} * ob);
  std::vector<uint8_t> y(ob);
  std::vector<float> acc(H);
  for (uint32_t t = 0; t < b.tokens; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (uint32_t k = 0; k < K; ++k) {
      expert_apply(c, b.indices[size_t{t} * K + k], b.x.data() + t * xb, b.scales.data() + size_t{t} * S, y.data());
      const float w = b.weights[size_t{t} * K + k];
      for (uint32_t h = 0; h < H; ++h) {
        float v;
        if (c.out_dtype == DType::kFp32) {
          std::memcpy(&v, y.data() + 4 * h, 4);
        } else {
          uint16_t u;
          std::memcpy(&u, y.data() + 2 * h, 2);
          v = from_bf16(u);
        }
        acc[h] = acc[h] + w * v;
      }
    }
    uint8_t* o = out.data() + t * ob;
    for (uint32_t h = 0; h < H; ++h) {
      if (c.out_dtype == DType::kFp32) {
        std::memcpy(o + 4 * h, &acc[h], 4);
      } else {
        const uint16_t u = to_bf16(acc[h]);
        std::memcpy(o + 2 * h, &u, 2);
      }
    }
  }
  return out;
}

uint64_t rows_digest(const std::vector<uint8_t>& rows, size_t row_bytes, uint32_t first_global, uint32_t count) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t h = 0xCBF29CE484222325ull ^ splitmix(first_global + i);
    for (size_t j = 0; j < row_bytes; ++j) h = (h ^ rows[i * row_bytes + j]) * 0x100000001B3ull;
    sum += splitmix(h);
  }
  return sum;
}

}  // namespace fabric_lib::moe::testing
