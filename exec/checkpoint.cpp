#include "exec/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <span>
#include <sstream>
#include <stdexcept>

#include "kernels/checksum.hpp"
#include "plan/plan_io.hpp"
#include "report/report_io.hpp"

namespace meshwork::exec {

namespace {

// Version 02 appends the experts' three vectors to 01's payload; 01 shards still load (no
// experts).
constexpr char kMagic[8] = {'M', 'W', 'C', 'K', 'P', 'T', '0', '3'};
constexpr char kMagicV2[8] = {'M', 'W', 'C', 'K', 'P', 'T', '0', '2'};  // no adam_step
constexpr char kMagicV1[8] = {'M', 'W', 'C', 'K', 'P', 'T', '0', '1'};  // no adam_step, no experts

void put(std::string& out, const void* p, std::size_t n) {
  if (n > 0) out.append(static_cast<const char*>(p), n);  // an empty vector's data() may be null
}
void put_i64(std::string& out, std::int64_t v) { put(out, &v, sizeof v); }
void put_floats(std::string& out, const std::vector<float>& v) {
  put_i64(out, static_cast<std::int64_t>(v.size()));
  put(out, v.data(), v.size() * sizeof(float));
}

struct Reader {
  const std::string& data;
  std::size_t at = 0;
  const std::string& file;
  void get(void* p, std::size_t n) {
    if (at + n > data.size()) throw std::runtime_error(file + ": truncated checkpoint shard");
    if (n == 0) return;  // an empty vector's data() may be null, which memcpy must not get
    std::memcpy(p, data.data() + at, n);
    at += n;
  }
  std::int64_t i64() {
    std::int64_t v = 0;
    get(&v, sizeof v);
    return v;
  }
  std::vector<float> floats() {
    const std::int64_t n = i64();
    if (n < 0 || static_cast<std::size_t>(n) > (data.size() - at) / sizeof(float)) throw std::runtime_error(file + ": corrupt checkpoint shard (a length past its end)");
    std::vector<float> v(static_cast<std::size_t>(n));
    get(v.data(), v.size() * sizeof(float));
    return v;
  }
};

std::uint64_t checksum(const std::string& bytes) {
  // FNV-1a over the payload as 32-bit words plus its tail (kernels/checksum's definition).
  std::vector<float> words(bytes.size() / sizeof(float));
  if (!words.empty()) std::memcpy(words.data(), bytes.data(), words.size() * sizeof(float));  // data() may be null (found by fuzz/checkpoint_fuzz.cpp)
  std::uint64_t h = kernels::checksum_fnv1a64<float>(words);
  for (std::size_t i = words.size() * sizeof(float); i < bytes.size(); ++i) h = (h ^ static_cast<unsigned char>(bytes[i])) * 1099511628211ULL;
  return h;
}

// fsync a file or directory so that a rename after it names durable bytes (POSIX: rename is
// atomic, not durable, until the directory is synced).
void sync(const std::filesystem::path& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) throw std::runtime_error(path.string() + ": cannot open to sync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error(path.string() + ": fsync failed: " + std::strerror(errno));
}

void write_atomically(const std::filesystem::path& path, const std::string& bytes) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) throw std::runtime_error(tmp.string() + ": cannot write the checkpoint");
  }
  sync(tmp, false);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error(path.string() + ": cannot rename the checkpoint into place: " + ec.message());
  sync(path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path(), true);
}

}  // namespace

std::filesystem::path shard_path(const std::filesystem::path& dir, std::int64_t step, std::int64_t rank) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld/rank-%05lld.ckpt", static_cast<long long>(step), static_cast<long long>(rank));
  return dir / name;
}

std::string serialize_shard(const RankState& s) {
  std::string payload;
  put_i64(payload, s.step);
  put_i64(payload, s.adam_step);
  put_i64(payload, s.rank);
  put_i64(payload, s.world_size);
  put_i64(payload, static_cast<std::int64_t>(s.plan_hash.size()));
  payload += s.plan_hash;
  put_floats(payload, s.params);
  put_floats(payload, s.exp_avg);
  put_floats(payload, s.exp_avg_sq);
  put_floats(payload, s.expert_params);
  put_floats(payload, s.expert_exp_avg);
  put_floats(payload, s.expert_exp_avg_sq);
  std::string bytes(kMagic, sizeof kMagic);
  const std::uint64_t sum = checksum(payload);
  put(bytes, &sum, sizeof sum);
  bytes += payload;
  return bytes;
}

void save_shard(const std::filesystem::path& dir, const RankState& s) {
  const auto path = shard_path(dir, s.step, s.rank);
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) throw std::runtime_error(path.parent_path().string() + ": cannot create the checkpoint directory: " + ec.message());
  write_atomically(path, serialize_shard(s));
}

void mark_complete(const std::filesystem::path& dir, std::int64_t step) { write_atomically(dir / "latest", std::to_string(step) + "\n"); }

std::optional<std::int64_t> latest_step(const std::filesystem::path& dir) { return read_latest(dir).step; }

LatestRecord parse_latest(const std::string& text) {
  LatestRecord r;
  std::size_t i = 0;
  std::int64_t step = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i < 18) step = step * 10 + (text[i++] - '0');
  if (i == 0 || step < 1 || i + 1 != text.size() || text[i] != '\n') {
    std::string shown;
    for (char c : text.substr(0, 32)) {
      if (c == '\n') shown += "\\n";
      else shown += (c >= 32 && c < 127) ? c : '?';
    }
    r.problem = "holds \"" + shown + (text.size() > 32 ? "...\"" : "\"") + ", not a step number and a newline";
    return r;
  }
  r.step = step;
  return r;
}

LatestRecord read_latest(const std::filesystem::path& dir) {
  const auto path = dir / "latest";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  std::ifstream in(path, std::ios::binary);
  std::string text;
  char buf[64];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > 64) break;  // a step number is short; more is damage
  }
  if (!in.eof() && text.size() <= 64) return {std::nullopt, "cannot be read"};
  return parse_latest(text);
}

std::vector<std::int64_t> checkpoint_steps(const std::filesystem::path& dir) {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // step-%08lld: eight digits, more from step 100,000,000.
    if (name.size() < 13 || name.size() > 23 || name.compare(0, 5, "step-") != 0 || !it->is_directory(ec)) continue;
    std::int64_t step = 0;
    bool digits = true;
    for (std::size_t i = 5; i < name.size(); ++i) {
      digits = digits && name[i] >= '0' && name[i] <= '9';
      step = step * 10 + (name[i] - '0');
    }
    if (digits && step > 0) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end(), std::greater<>());
  return steps;
}

std::filesystem::path set_aside(const std::filesystem::path& path) {
  for (int k = 1; k < 1000; ++k) {
    const std::filesystem::path to = path.string() + (k == 1 ? ".damaged" : ".damaged-" + std::to_string(k));
    std::error_code ec;
    if (std::filesystem::exists(to, ec) || std::filesystem::is_symlink(to, ec)) continue;
    std::filesystem::rename(path, to, ec);
    if (ec) throw std::runtime_error(path.string() + ": cannot set the damaged checkpoint aside: " + ec.message());
    return to;
  }
  throw std::runtime_error(path.string() + ": cannot set the damaged checkpoint aside: 999 copies already are");
}

std::vector<std::int64_t> prune_checkpoints(const std::filesystem::path& dir, std::vector<std::int64_t> steps, std::int64_t keep) {
  std::vector<std::int64_t> deleted;
  if (keep <= 0) return deleted;
  std::sort(steps.begin(), steps.end(), std::greater<>());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  for (std::size_t i = static_cast<std::size_t>(keep); i < steps.size(); ++i) {
    const auto step_dir = shard_path(dir, steps[i], 0).parent_path();
    std::error_code ec;
    std::filesystem::remove_all(step_dir, ec);
    if (ec) throw std::runtime_error(step_dir.string() + ": cannot delete an old checkpoint (--keep-last): " + ec.message());
    deleted.push_back(steps[i]);
  }
  return deleted;
}

RankState parse_shard(const std::string& bytes, const std::string& file) {
  const bool v1 = bytes.size() >= sizeof kMagicV1 && std::memcmp(bytes.data(), kMagicV1, sizeof kMagicV1) == 0;
  const bool v2 = bytes.size() >= sizeof kMagicV2 && std::memcmp(bytes.data(), kMagicV2, sizeof kMagicV2) == 0;
  if (bytes.size() < sizeof kMagic + sizeof(std::uint64_t) || (!v1 && !v2 && std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)) {
    throw std::runtime_error(file + ": not a meshwork checkpoint shard (truncated, or another file)");
  }
  std::uint64_t sum = 0;
  std::memcpy(&sum, bytes.data() + sizeof kMagic, sizeof sum);
  const std::string payload = bytes.substr(sizeof kMagic + sizeof sum);
  if (checksum(payload) != sum) throw std::runtime_error(file + ": checksum mismatch (the shard is corrupt or truncated)");
  Reader r{payload, 0, file};
  RankState s;
  s.step = r.i64();
  s.adam_step = v1 || v2 ? s.step : r.i64();
  if (s.adam_step < 0 || s.adam_step > s.step) throw std::runtime_error(file + ": corrupt checkpoint shard (" + std::to_string(s.adam_step) + " updates in " + std::to_string(s.step) + " steps)");
  s.rank = r.i64();
  s.world_size = r.i64();
  const std::int64_t n = r.i64();
  if (n < 0 || n > 1024) throw std::runtime_error(file + ": corrupt checkpoint shard");
  s.plan_hash.resize(static_cast<std::size_t>(n));
  r.get(s.plan_hash.data(), s.plan_hash.size());
  s.params = r.floats();
  s.exp_avg = r.floats();
  s.exp_avg_sq = r.floats();
  if (!v1) {
    s.expert_params = r.floats();
    s.expert_exp_avg = r.floats();
    s.expert_exp_avg_sq = r.floats();
  }
  if (r.at != payload.size()) throw std::runtime_error(file + ": corrupt checkpoint shard (bytes past its end)");
  return s;
}

RankState load_shard(const std::filesystem::path& dir, std::int64_t step, std::int64_t rank, std::int64_t world_size, const std::string& plan_hash) {
  const auto path = shard_path(dir, step, rank);
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(file + ": no checkpoint shard for rank " + std::to_string(rank));
  std::stringstream ss;
  ss << in.rdbuf();
  RankState s = parse_shard(ss.str(), file);
  if (s.step != step || s.rank != rank) throw std::runtime_error(file + ": holds step " + std::to_string(s.step) + " of rank " + std::to_string(s.rank));
  if (s.world_size != world_size) {
    throw ForeignCheckpoint(file + ": written by a run of " + std::to_string(s.world_size) + " ranks, resumed with " + std::to_string(world_size));
  }
  if (s.plan_hash != plan_hash) throw ForeignCheckpoint(file + ": written for another plan (hash " + s.plan_hash + ", this plan " + plan_hash + ")");
  return s;
}

std::string checkpoint_plan_key(const plan::Plan& plan) {
  const nlohmann::json all = plan::to_json(plan);
  nlohmann::json training = all.at("training"), parallelism = all.at("parallelism");
  training.erase("tokens");
  training.erase("attention_flops");
  training.erase("fp8_attention");  // the executors run no FP8 attention: it prices, it does not train
  training.erase("attention_kernel");  // the executors run their own attention kernel: it prices, it does not train
  training.erase("data_loading");             // how a batch reaches the GPUs: it costs, it does not train
  training.erase("attention_mask_in_batch");  // the same
  training.erase("grad_reduce_in_bf16");      // the executors reduce in their own precision: it prices, it does not train
  training.erase("optimizer_states");         // the executors' AdamW keeps fp32 states: it prices, it does not train
  parallelism.erase("overlap");
  parallelism.erase("context_parallel_comm_type");  // how CP's exchange is priced, not what is trained
  const nlohmann::json key = {{"model", all.at("model")}, {"training", training}, {"parallelism", parallelism}, {"seed", all.at("run").at("seed")}};
  return report::fnv1a_hex(key.dump());
}

}  // namespace meshwork::exec
