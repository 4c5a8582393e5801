#include "exec/params.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <thread>
#include <vector>

namespace meshwork::exec {

namespace {

// SplitMix64 (Steele, Lea and Flood 2014; Vigna's reference code): the state advances by
// this constant per output.
constexpr std::uint64_t kSplitMixIncrement = 0x9e3779b97f4a7c15ULL;
// Below this many elements per thread a parameter is filled on the calling thread alone (every
// CPU test model): a thread's start costs more than a million normals save.
constexpr Index kElementsPerThread = Index{1} << 22;

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += kSplitMixIncrement);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t key(const std::string& name, std::uint64_t seed) {
  std::uint64_t h = 14695981039346656037ULL ^ seed;  // FNV-1a over the name
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

double uniform01(std::uint64_t& state) { return (static_cast<double>(splitmix64(state) >> 11) + 0.5) * 0x1.0p-53; }

}  // namespace

Mat initial_value(const ParamSpec& spec, std::uint64_t seed) {
  Mat m(spec.rows, spec.cols);
  switch (spec.init) {
    case Init::ones: m.setOnes(); break;
    case Init::zeros: m.setZero(); break;
    case Init::normal: {
      // Element i draws SplitMix64's outputs 2i + 1 and 2i + 2 of the parameter's stream. The
      // generator is a counter (each output adds one constant to the state), so a range of
      // elements starts from the state key + 2 * first * constant, and large parameters are
      // filled by several threads with the same bits as one (a 7B-shaped model's billion
      // values took 51 s on one core of the GPU machine).
      const std::uint64_t k = key(spec.name, seed);
      float* out = m.data();
      auto fill = [&](Index first, Index last) {
        std::uint64_t state = k + static_cast<std::uint64_t>(2 * first) * kSplitMixIncrement;
        for (Index i = first; i < last; ++i) {
          // Box-Muller (Box & Muller 1958): one normal from two uniforms.
          const double u = uniform01(state), v = uniform01(state);
          out[i] = static_cast<float>(spec.std * std::sqrt(-2 * std::log(u)) * std::cos(2 * std::numbers::pi * v));
        }
      };
      const Index n = m.size();
      const Index threads = std::min<Index>(std::max(1U, std::thread::hardware_concurrency()), n / kElementsPerThread);
      if (threads <= 1) {
        fill(0, n);
        break;
      }
      std::vector<std::thread> pool;
      pool.reserve(static_cast<std::size_t>(threads));
      try {
        for (Index t = 1; t < threads; ++t) pool.emplace_back(fill, n * t / threads, n * (t + 1) / threads);
      } catch (...) {  // a thread that would not start: join the others before saying so
        for (auto& th : pool) th.join();
        throw;
      }
      fill(0, n / threads);  // the calling thread's share
      for (auto& th : pool) th.join();
      break;
    }
  }
  return m;
}

Mat shard(const Mat& full, Split split, int tp_rank, int tp) {
  auto block = [&](Index n) {
    if (n % tp != 0) throw std::invalid_argument("a dimension of " + std::to_string(n) + " does not split over TP " + std::to_string(tp));
    return n / tp;
  };
  switch (split) {
    case Split::replicated: return full;
    case Split::rows: {
      const Index b = block(full.rows());
      return full.middleRows(tp_rank * b, b);
    }
    case Split::columns: {
      const Index b = block(full.cols());
      return full.middleCols(tp_rank * b, b);
    }
    case Split::column_halves: {
      if (full.cols() == 1) {  // its bias vector: halves of its rows
        const Index half = full.rows() / 2, b = block(half);
        Mat out(2 * b, 1);
        out << full.middleRows(tp_rank * b, b), full.middleRows(half + tp_rank * b, b);
        return out;
      }
      const Index half = full.cols() / 2, b = block(half);
      Mat out(full.rows(), 2 * b);
      out << full.middleCols(tp_rank * b, b), full.middleCols(half + tp_rank * b, b);
      return out;
    }
  }
  return full;
}

void place(const Mat& slice, Mat& full, Split split, int tp_rank, int tp) {
  switch (split) {
    case Split::replicated: full = slice; return;
    case Split::rows: full.middleRows(tp_rank * (full.rows() / tp), full.rows() / tp) = slice; return;
    case Split::columns: full.middleCols(tp_rank * (full.cols() / tp), full.cols() / tp) = slice; return;
    case Split::column_halves:
      if (full.cols() == 1) {
        const Index half = full.rows() / 2, b = half / tp;
        full.middleRows(tp_rank * b, b) = slice.topRows(b);
        full.middleRows(half + tp_rank * b, b) = slice.bottomRows(b);
      } else {
        const Index half = full.cols() / 2, b = half / tp;
        full.middleCols(tp_rank * b, b) = slice.leftCols(b);
        full.middleCols(half + tp_rank * b, b) = slice.rightCols(b);
      }
      return;
  }
}

bool is_moe_layer(const plan::ModelConfig& m, std::int64_t layer) { return m.is_moe() && layer >= m.moe.first_k_dense_layers; }

Index expert_ffn(const plan::ModelConfig& m) { return m.moe.moe_ffn_hidden_size > 0 ? m.moe.moe_ffn_hidden_size : m.ffn_hidden_size; }

std::vector<ParamSpec> layer_specs(const plan::ModelConfig& m, std::int64_t layer) {
  const std::string p = "layers." + std::to_string(layer) + ".";
  const Index h = m.hidden_size, hd = m.kv_channels;
  const Index q = m.num_attention_heads * hd, kv = m.num_query_groups * hd;
  const bool swiglu = m.activation == plan::Activation::swiglu;
  const Index ffn = m.ffn_hidden_size * (swiglu ? 2 : 1);
  // Megatron's scaled init for the layers that write into the residual stream:
  // std / sqrt(2 L) (Shoeybi et al. 2019, following GPT-2, Radford et al. 2019 §2.3).
  const double out_std = 0.02 / std::sqrt(2.0 * static_cast<double>(m.num_layers));
  const bool ln = m.normalization == plan::Normalization::layernorm;
  std::vector<ParamSpec> s;
  auto norm = [&](const std::string& n) {
    s.push_back({p + n + ".gamma", h, 1, Split::replicated, Init::ones, 0, true});
    if (ln) s.push_back({p + n + ".beta", h, 1, Split::replicated, Init::zeros, 0, true});
  };
  auto linear = [&](const std::string& n, Index in, Index out, Split w, Split b, bool bias_partial, double std) {
    s.push_back({p + n + ".weight", in, out, w, Init::normal, std, false});
    if (m.add_bias_linear) s.push_back({p + n + ".bias", out, 1, b, Init::zeros, 0, bias_partial});
  };
  norm("ln1");
  linear("q", h, q, Split::columns, Split::rows, false, 0.02);
  linear("k", h, kv, Split::columns, Split::rows, false, 0.02);
  linear("v", h, kv, Split::columns, Split::rows, false, 0.02);
  linear("o", q, h, Split::rows, Split::replicated, true, out_std);
  norm("ln2");
  if (is_moe_layer(m, layer)) {
    // A router and num_moe_experts expert MLPs in place of the MLP (Shazeer et al. 2017;
    // Fedus et al. 2021). No biases: execute() refuses MoE with add_bias_linear. The router
    // sees each TP rank's share of the tokens (sequence parallelism, which MoE with TP needs),
    // so TP sums its gradient; each expert is split over TP as the dense MLP is (expert tensor
    // parallelism = TP, Megatron-core's default).
    const Index f = expert_ffn(m);
    s.push_back({p + "router.weight", h, m.moe.num_moe_experts, Split::replicated, Init::normal, 0.02, true});
    for (std::int64_t e = 0; e < m.moe.num_moe_experts; ++e) {
      const std::string x = p + "experts." + std::to_string(e) + ".";
      s.push_back({x + "fc1.weight", h, f * (swiglu ? 2 : 1), swiglu ? Split::column_halves : Split::columns, Init::normal, 0.02, false, e});
      s.push_back({x + "fc2.weight", f, h, Split::rows, Init::normal, out_std, false, e});
    }
    return s;
  }
  s.push_back({p + "fc1.weight", h, ffn, swiglu ? Split::column_halves : Split::columns, Init::normal, 0.02, false});
  if (m.add_bias_linear) {
    // A bias vector splits as its layer's columns: rows of the [n, 1] vector, halves for SwiGLU.
    s.push_back({p + "fc1.bias", ffn, 1, swiglu ? Split::column_halves : Split::rows, Init::zeros, 0, false});
  }
  linear("fc2", m.ffn_hidden_size, h, Split::rows, Split::replicated, true, out_std);
  return s;
}

std::vector<ParamSpec> embedding_specs(const plan::ModelConfig& m) {
  std::vector<ParamSpec> s;
  s.push_back({"embedding.word", m.vocab_size, m.hidden_size, Split::rows, Init::normal, 0.02, false});
  // Learned absolute positions (GPT-2); a RoPE model rotates its queries and keys instead
  // (kernels/rope.hpp) and has no position table.
  if (m.position_embedding_type == plan::PositionEmbedding::learned_absolute) {
    s.push_back({"embedding.position", m.seq_length, m.hidden_size, Split::replicated, Init::normal, 0.02, true});
  }
  return s;
}

std::vector<ParamSpec> head_specs(const plan::ModelConfig& m) {
  std::vector<ParamSpec> s;
  s.push_back({"final_norm.gamma", m.hidden_size, 1, Split::replicated, Init::ones, 0, true});
  if (m.normalization == plan::Normalization::layernorm) s.push_back({"final_norm.beta", m.hidden_size, 1, Split::replicated, Init::zeros, 0, true});
  if (m.untie_embeddings_and_output_weights) s.push_back({"head.weight", m.hidden_size, m.vocab_size, Split::columns, Init::normal, 0.02, false});
  return s;
}

}  // namespace meshwork::exec
