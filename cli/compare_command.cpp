// meshwork compare PREDICTED.json MEASURED [--json]: a predicted Report (estimate or simulate
// --json) against a measured one: a Report as JSON (execute --json) or a Megatron-LM training
// log, told apart by their content; or a predicted timeline (simulate --trace) against a
// measured one (execute --trace), slice by slice.
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <sstream>

#include "cli/commands.hpp"
#include "report/compare.hpp"
#include "report/megatron_log.hpp"
#include "report/report_io.hpp"
#include "report/trace.hpp"

namespace meshwork::cli {
namespace {

namespace fs = std::filesystem;

// The file's text, or an error printed as "FILE: error: ...".
std::optional<std::string> read_text(Io& io, const std::string& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    io.err << file << ": error: the file does not exist\n";
    return std::nullopt;
  }
  if (fs::is_directory(file, ec)) {
    io.err << file << ": error: is a directory\n";
    return std::nullopt;
  }
  std::ifstream in(file, std::ios::binary);
  std::stringstream s;
  if (!(in && s << in.rdbuf())) {
    io.err << file << ": error: cannot read the file\n";
    return std::nullopt;
  }
  return s.str();
}

// A JSON document starts with '{' (after blanks); a training log does not.
bool looks_like_json(const std::string& text) {
  const std::size_t at = text.find_first_not_of(" \t\r\n");
  return at != std::string::npos && text[at] == '{';
}

std::optional<report::Report> parse_report(Io& io, const std::string& file,
                                           const std::string& text) {
  try {
    return report::from_json(nlohmann::json::parse(text));
  } catch (const nlohmann::json::exception& e) {
    io.err << file << ": error: not a meshwork Report: " << e.what() << '\n';
    return std::nullopt;
  }
}

}  // namespace

void add_compare_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand(
      "compare", "Predicted against measured: each figure's error, the step time's error by part");
  auto predicted_file = std::make_shared<std::string>();
  auto measured_file = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("PREDICTED", *predicted_file,
                  "Report as JSON (meshwork estimate --json, simulate --json), or a Chrome trace (simulate --trace)")
      ->required();
  cmd->add_option("MEASURED", *measured_file,
                  "Report as JSON (meshwork execute --json), a Megatron-LM or Megatron-DeepSpeed training log, or a Chrome trace (execute --trace)")
      ->required();
  cmd->add_flag("--json", *json, "Print the comparison as JSON");
  auto top = std::make_shared<std::size_t>(20);
  cmd->add_option("--top", *top, "Traces: the slices of largest error to list")->check(CLI::Range(1, 1000000))->capture_default_str();
  cmd->footer(
      "A Megatron-LM or Megatron-DeepSpeed log gives the median elapsed time per iteration after the warm-up\n"
      "(intervals holding any of a run's first 3 iterations) and the throughput per GPU when logged; its world size,\n"
      "mesh, batch and sequence, where logged, are checked against the prediction (a warning when they differ).\n"
      "Two Chrome traces (simulate --trace --fine against execute --trace of the same plan) are compared slice by slice: per rank and\n"
      "stream, the i-th slice of each (a measured slice's median over the steps after the first); the largest errors are listed (--top).\n"
      "Exit status: 0 compared, 1 an unreadable or malformed input (or traces that do not line up), 2 bad usage.");
  cmd->callback([=, &io] {
    io.exit_code = 1;  // until both inputs are read
    const auto predicted_text = read_text(io, *predicted_file);
    const auto measured_text = read_text(io, *measured_file);
    if (!predicted_text || !measured_text) return;
    // Two timelines (simulate --trace against execute --trace): slice by slice.
    if (report::is_chrome_trace(*predicted_text) || report::is_chrome_trace(*measured_text)) {
      if (!report::is_chrome_trace(*predicted_text) || !report::is_chrome_trace(*measured_text)) {
        io.err << (report::is_chrome_trace(*predicted_text) ? *measured_file : *predicted_file)
               << ": error: not a Chrome trace: a trace is compared with a trace (simulate --trace against execute --trace)\n";
        return;
      }
      report::TraceComparison c;
      try {
        c = report::compare_traces(report::read_chrome_trace(*predicted_text), report::read_chrome_trace(*measured_text));
      } catch (const std::invalid_argument& e) {
        io.err << "meshwork compare: error: " << e.what() << '\n';
        return;
      }
      // Timelines of different Programs cannot be lined up: the comparison says where, exit 1.
      io.exit_code = c.mismatches.empty() ? 0 : 1;
      if (*json) {
        nlohmann::json j = report::to_json(c);
        j["predicted_file"] = *predicted_file;
        j["measured_file"] = *measured_file;
        io.out << j.dump(2) << '\n';
        return;
      }
      io.out << *predicted_file << " against " << *measured_file << " (traces)\n" << report::to_text(c, *top);
      return;
    }
    if (!looks_like_json(*predicted_text)) {
      io.err << *predicted_file
             << ": error: not a meshwork Report: PREDICTED is a Report as JSON (meshwork estimate "
                "--json)\n";
      return;
    }
    const auto predicted = parse_report(io, *predicted_file, *predicted_text);
    if (!predicted) return;

    report::Report measured;
    std::vector<std::string> lacks;
    std::vector<std::string> unchecked;
    std::string source = "Report";
    if (looks_like_json(*measured_text)) {
      auto r = parse_report(io, *measured_file, *measured_text);
      if (!r) return;
      measured = std::move(*r);
    } else {
      auto log = report::parse_megatron_log(*measured_text);
      for (const auto& e : log.errors) {
        // "LINE: message" becomes "FILE:LINE: error: message", as plan diagnostics print.
        const std::size_t colon = e.find(": ");
        const bool numbered =
            colon != std::string::npos && e.find_first_not_of("0123456789") == colon;
        io.err << *measured_file << (numbered ? ":" + e.substr(0, colon) : std::string())
               << ": error: " << (numbered ? e.substr(colon + 2) : e) << '\n';
      }
      if (!log.ok()) return;
      measured = std::move(log.report);
      lacks = std::move(log.lacks);
      source = std::string(report::to_string(log.format)) + " log";
      if (!log.shape.world_size) {
        unchecked.push_back("the log does not give its world size (no \"using world size\" line or arguments dump): "
                            "check that it is of a " + std::to_string(predicted->num_gpus) + "-GPU run");
      }
    }
    io.exit_code = 0;
    report::Comparison c = report::compare(*predicted, measured, lacks);
    for (const auto& m : c.mismatches) io.err << *measured_file << ": warning: not the predicted run: " << m << '\n';
    for (const auto& m : unchecked) io.err << *measured_file << ": warning: " << m << '\n';
    for (const auto& m : unchecked) c.notes.push_back(m);
    for (const auto& n : measured.notes) c.notes.push_back("measured: " + n);
    if (*json) {
      nlohmann::json j = report::to_json(c);
      j["predicted_file"] = *predicted_file;
      j["measured_file"] = *measured_file;
      j["measured_source"] = source;
      io.out << j.dump(2) << '\n';
      return;
    }
    io.out << *predicted_file << " against " << *measured_file << " (" << source << ")\n"
           << report::to_text(c);
  });
}

}  // namespace meshwork::cli
