#include "cli/sweep_mpi.hpp"

#include <algorithm>
#include <cstdlib>

#ifdef MESHWORK_HAVE_MPI
#include <mpi.h>
#endif

#include "models/sweep.hpp"

namespace meshwork::cli {
namespace {

#ifdef MESHWORK_HAVE_MPI
bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

// Rows travel as the JSON of what a row needs for ranking and output.
nlohmann::json encode(const models::SweepRow& r) {
  const auto& rep = r.report;
  double mem = 0;
  return {{"i", r.index},
          {"v", r.values},
          {"s", static_cast<int>(r.status)},
          {"why", r.reason},
          {"step", rep.step_time_s},
          {"mfu", rep.mfu},
          {"hfu", rep.hfu},
          {"mtf", rep.model_tflops_per_gpu},
          {"htf", rep.hardware_tflops_per_gpu},
          {"tps", rep.tokens_per_s},
          {"bub", rep.bubble_fraction},
          {"ttt", rep.time_to_train_s},
          {"mem", [&] {
             for (const auto& m : rep.memory) mem = std::max(mem, m.total_gib);
             return mem;
           }()},
          {"fits", rep.fits},
          {"mw", rep.power.cluster_megawatts},
          {"jpt", rep.power.joules_per_token},
          {"name", rep.plan_name},
          {"gpus", rep.num_gpus}};
}

models::SweepRow decode(const nlohmann::json& j) {
  models::SweepRow r;
  r.index = j["i"].get<std::uint64_t>();
  r.values = j["v"].get<std::vector<std::string>>();
  r.status = static_cast<models::PointStatus>(j["s"].get<int>());
  r.reason = j["why"].get<std::string>();
  auto& rep = r.report;
  rep.step_time_s = j["step"];
  rep.mfu = j["mfu"];
  rep.hfu = j["hfu"];
  rep.model_tflops_per_gpu = j["mtf"];
  rep.hardware_tflops_per_gpu = j["htf"];
  rep.tokens_per_s = j["tps"];
  rep.bubble_fraction = j["bub"];
  rep.time_to_train_s = j["ttt"];
  report::StageMemory m;
  m.total_gib = j["mem"];
  rep.memory.push_back(m);
  rep.fits = j["fits"];
  rep.power.cluster_megawatts = j["mw"];
  rep.power.joules_per_token = j["jpt"];
  rep.plan_name = j["name"];
  rep.num_gpus = j["gpus"];
  return r;
}
#endif

}  // namespace

SweepMpi::SweepMpi() {
#ifdef MESHWORK_HAVE_MPI
  if (!launched_by_mpi()) return;
  int flag = 0;
  MPI_Initialized(&flag);
  if (!flag) {
    MPI_Init(nullptr, nullptr);
    initialised_ = true;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  rank_ = static_cast<std::uint64_t>(rank);
  size_ = static_cast<std::uint64_t>(size);
#endif
}

SweepMpi::~SweepMpi() {
#ifdef MESHWORK_HAVE_MPI
  if (initialised_) MPI_Finalize();
#endif
}

std::vector<models::SweepRow> SweepMpi::gather(const std::vector<models::SweepRow>& mine) {
#ifdef MESHWORK_HAVE_MPI
  if (size_ <= 1) return mine;
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : mine) arr.push_back(encode(r));
  const std::vector<std::uint8_t> bytes = nlohmann::json::to_cbor(arr);
  int length = static_cast<int>(bytes.size());
  std::vector<int> lengths(size_), offsets(size_);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<std::uint8_t> all;
  if (rank_ == 0) {
    int total = 0;
    for (std::size_t k = 0; k < lengths.size(); ++k) {
      offsets[k] = total;
      total += lengths[k];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(bytes.data(), length, MPI_BYTE, all.data(), lengths.data(), offsets.data(), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank_ != 0) return {};
  std::vector<models::SweepRow> rows;
  for (std::size_t k = 0; k < lengths.size(); ++k) {
    const auto begin = all.begin() + offsets[k];
    const auto part = nlohmann::json::from_cbor(begin, begin + lengths[k]);
    for (const auto& j : part) rows.push_back(decode(j));
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  return rows;
#else
  return mine;
#endif
}

}  // namespace meshwork::cli
