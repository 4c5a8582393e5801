#include "plan/plan_io.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <atomic>
#include <unistd.h>
#include <system_error>

#include "plan/reader.hpp"
#include "plan/validate.hpp"

namespace meshwork::plan {
namespace {

bool is_under(const std::string& path, const std::string& section) {
  return path.size() > section.size() && path.compare(0, section.size(), section) == 0 &&
         (path[section.size()] == '.' || path[section.size()] == '[');
}

// The source line of a diagnostic: its own key's, else its nearest written ancestor's.
int line_of(std::string path, const ReadContext& ctx, const std::map<std::string, int>& lines) {
  while (!path.empty()) {
    auto w = ctx.written_paths.find(path);
    auto it = lines.find(w == ctx.written_paths.end() ? path : w->second);
    if (it != lines.end()) return it->second;
    const auto cut = path.find_last_of(".[");
    if (cut == std::string::npos) break;
    path.resize(cut);
  }
  return 0;
}

// A Hugging Face config.json given where a plan belongs: a model_type or architectures and
// the model's sizes at the top, and none of a plan's sections.
bool is_hf_config(const nlohmann::json& root) {
  if (!root.is_object()) return false;
  for (const char* section : {"model", "training", "parallelism", "cluster", "schema_version"}) {
    if (root.contains(section)) return false;
  }
  const bool names_a_model = root.contains("model_type") || root.contains("architectures");
  const bool has_sizes = root.contains("num_hidden_layers") || root.contains("n_layer") || root.contains("hidden_size") ||
                         root.contains("text_config");
  return names_a_model && has_sizes;
}

LoadResult finish(const nlohmann::json& root, const std::map<std::string, int>& lines,
                  const std::filesystem::path& base_dir) {
  LoadResult out;
  if (is_hf_config(root)) {
    const auto type = root.contains("model_type") && root["model_type"].is_string() ? " (model_type " + root["model_type"].get<std::string>() + ")" : std::string();
    out.diagnostics.error("", "this is a Hugging Face config.json" + type +
                                  ", not a plan: `meshwork import-hf FILE` prints the model section it makes, or name it in a "
                                  "plan as model: {hf_config: FILE}");
    return out;
  }
  ReadContext ctx;
  ctx.base_dir = base_dir;
  read_plan(root, out.plan, ctx);
  resolve(out.plan, ctx.diagnostics);
  const Diagnostics read = std::move(ctx.diagnostics);
  Diagnostics rules;
  if (ctx.value_errors == 0) {
    rules = validate(out.plan);
  } else {
    check_field_ranges(out.plan, rules);
  }

  auto under_any = [](const std::string& path, const std::vector<std::string>& sections) {
    return std::any_of(sections.begin(), sections.end(), [&](const std::string& s) { return is_under(path, s); });
  };
  std::vector<Diagnostic> items;
  for (const auto& d : read.items()) {
    if (under_any(d.path, ctx.missing_sections)) continue;  // one problem: the section is missing
    items.push_back(d);
  }
  for (const auto& d : rules.items()) {
    // A field the reader already reported holds its default: what the rules say of it is noise.
    if (read.find(d.path) != nullptr) continue;
    if (under_any(d.path, ctx.missing_sections)) continue;
    if (d.message.rfind("required field is missing", 0) == 0 && under_any(d.path, ctx.unsourced_sections)) continue;
    items.push_back(d);
  }
  Diagnostics kept;
  for (auto& d : items) {
    if (d.line == 0) d.line = line_of(d.path, ctx, lines);
    kept.add(std::move(d));
  }
  kept.deduplicate();

  // In file order: problems read top to bottom; file-level ones (line 0) first.
  auto sorted = kept.items();
  std::stable_sort(sorted.begin(), sorted.end(), [](const Diagnostic& a, const Diagnostic& b) { return a.line < b.line; });
  out.diagnostics = Diagnostics();
  for (auto& d : sorted) out.diagnostics.add(std::move(d));
  return out;
}

}  // namespace

LoadResult load_plan_json(const nlohmann::json& root, const std::filesystem::path& base_dir) {
  return finish(root, {}, base_dir);
}

LoadResult load_plan_text(std::string_view text, Format format, const std::filesystem::path& base_dir) {
  auto doc = parse_document(text, format);
  if (!doc.document) {
    LoadResult out;
    out.diagnostics = std::move(doc.diagnostics);
    return out;
  }
  auto out = finish(doc.document->root, doc.document->lines, base_dir);
  doc.diagnostics.append(out.diagnostics);
  out.diagnostics = std::move(doc.diagnostics);
  return out;
}

LoadResult load_plan(const std::filesystem::path& path) {
  auto doc = read_document(path);
  if (!doc.document) {
    LoadResult out;
    out.diagnostics = std::move(doc.diagnostics);
    return out;
  }
  auto out = finish(doc.document->root, doc.document->lines, path.parent_path());
  doc.diagnostics.append(out.diagnostics);
  out.diagnostics = std::move(doc.diagnostics);
  return out;
}

std::string to_json_string(const Plan& plan) { return to_json(plan).dump(2) + "\n"; }

bool write_file_atomically(const std::filesystem::path& path, std::string_view content, std::string& error) {
  // Unique among this process's writes and other processes': pid and a counter.
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path tmp =
      path.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      error = "cannot create " + tmp.string();
      return false;
    }
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      error = "cannot write " + tmp.string();
      out.close();
      std::remove(tmp.c_str());
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    error = "cannot rename " + tmp.string() + " to " + path.string() + ": " + ec.message();
    std::filesystem::remove(tmp, ec);
    return false;
  }
  return true;
}

bool save_plan(const Plan& plan, const std::filesystem::path& path, std::string& error) {
  return write_file_atomically(path, to_json_string(plan), error);
}

}  // namespace meshwork::plan
