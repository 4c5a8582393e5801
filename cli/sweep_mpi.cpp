#include "cli/sweep_mpi.hpp"

#include <algorithm>
#include <cstdlib>

#ifdef MESHWORK_HAVE_MPI
#include <mpi.h>
#endif

#include "models/sweep.hpp"
#include "report/report_io.hpp"

namespace meshwork::cli {
namespace {

#ifdef MESHWORK_HAVE_MPI
bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

// Rows travel as JSON (CBOR on the wire), the report in the Report schema.
nlohmann::json encode(const models::SweepRow& r) {
  return {{"i", r.index}, {"v", r.values}, {"s", static_cast<int>(r.status)}, {"why", r.reason},
          {"report", report::to_json(r.report)}};
}

models::SweepRow decode(const nlohmann::json& j) {
  models::SweepRow r;
  r.index = j.at("i").get<std::uint64_t>();
  r.values = j.at("v").get<std::vector<std::string>>();
  r.status = static_cast<models::PointStatus>(j.at("s").get<int>());
  r.reason = j.at("why").get<std::string>();
  r.report = report::from_json(j.at("report"));
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
  // Lengths as 64-bit and the payload in chunks under MPI's int count: a large grid's results
  // can pass 2 GiB in all (one CBOR row is about 200 bytes; 10 million rows is 2 GB).
  constexpr std::size_t kChunk = std::size_t{1} << 30;
  std::uint64_t length = bytes.size();
  std::vector<std::uint64_t> lengths(size_);
  MPI_Gather(&length, 1, MPI_UINT64_T, lengths.data(), 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  std::vector<std::uint8_t> all;
  std::vector<std::size_t> offsets(lengths.size());
  if (rank_ == 0) {
    std::size_t total = 0;
    for (std::size_t k = 0; k < lengths.size(); ++k) {
      offsets[k] = total;
      total += lengths[k];
    }
    all.resize(total);
    std::copy(bytes.begin(), bytes.end(), all.begin());
    for (std::size_t k = 1; k < size_; ++k) {
      for (std::size_t done = 0; done < lengths[k]; done += kChunk) {
        const int n = static_cast<int>(std::min(kChunk, lengths[k] - done));
        MPI_Recv(all.data() + offsets[k] + done, n, MPI_BYTE, static_cast<int>(k), 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
    }
  } else {
    for (std::size_t done = 0; done < bytes.size(); done += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, bytes.size() - done));
      MPI_Send(bytes.data() + done, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    }
  }
  if (rank_ != 0) return {};
  std::vector<models::SweepRow> rows;
  for (std::size_t k = 0; k < lengths.size(); ++k) {
    const auto begin = all.begin() + static_cast<std::ptrdiff_t>(offsets[k]);
    const auto part = nlohmann::json::from_cbor(begin, begin + static_cast<std::ptrdiff_t>(lengths[k]));
    for (const auto& j : part) rows.push_back(decode(j));
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  return rows;
#else
  return mine;
#endif
}

}  // namespace meshwork::cli
