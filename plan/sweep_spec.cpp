#include "plan/sweep_spec.hpp"

#include <algorithm>
#include <limits>

#include "plan/document.hpp"
#include "plan/enums.hpp"
#include "plan/field_paths.hpp"

namespace meshwork::plan {

std::uint64_t SweepSpec::size() const {
  std::uint64_t n = 1;
  for (const auto& a : axes) {
    const std::uint64_t k = a.values.size();
    if (k != 0 && n > std::numeric_limits<std::uint64_t>::max() / k) return std::numeric_limits<std::uint64_t>::max();
    n *= k;
  }
  return n;
}

namespace {

std::size_t axis_index(const SweepSpec& s, std::uint64_t index, std::size_t axis) {
  std::uint64_t rest = index;
  for (std::size_t a = s.axes.size(); a-- > axis + 1;) rest /= s.axes[a].values.size();
  return static_cast<std::size_t>(rest % s.axes[axis].values.size());
}

}  // namespace

nlohmann::json SweepSpec::point(std::uint64_t index) const {
  nlohmann::json tree = base_tree;
  for (std::size_t a = 0; a < axes.size(); ++a) {
    const auto& axis = axes[a];
    set_field(tree, FieldPath{axis.path, axis.parent, axis.keys}, axis.values[axis_index(*this, index, a)]);
  }
  return tree;
}

std::vector<std::string> SweepSpec::point_values(std::uint64_t index) const {
  std::vector<std::string> out;
  for (std::size_t a = 0; a < axes.size(); ++a) {
    const auto& v = axes[a].values[axis_index(*this, index, a)];
    out.push_back(v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

namespace {

SweepLoadResult load_sweep_document(DocumentResult doc, const std::filesystem::path& file) {
  SweepLoadResult out;
  if (!doc.document) {
    out.diagnostics = std::move(doc.diagnostics);
    return out;
  }
  const auto& root = doc.document->root;
  auto line = [&](const std::string& path) {
    auto it = doc.document->lines.find(path);
    return it == doc.document->lines.end() ? 0 : it->second;
  };
  auto error = [&](const std::string& path, const std::string& message) {
    out.diagnostics.add({path, message, Severity::error, line(path)});
  };
  for (const auto& [key, value] : root.items()) {
    if (key != "base" && key != "grid" && key != "rank_by" && key != "top") error(key, "unknown key (base, grid, rank_by, top)");
  }
  // The base plan.
  if (!root.contains("base") || !root["base"].is_string()) {
    error("base", "required: the path of the base plan file");
  } else {
    out.spec.base = root["base"].get<std::string>();
    if (out.spec.base.is_relative()) out.spec.base = file.parent_path() / out.spec.base;
    auto base = read_document(out.spec.base);
    if (!base.document) {
      for (const auto& d : base.diagnostics.items()) error("base", out.spec.base.string() + ": " + d.message);
    } else {
      out.spec.base_tree = base.document->root;
    }
  }
  // The axes.
  if (!root.contains("grid") || !root["grid"].is_object() || root["grid"].empty()) {
    error("grid", "required: a mapping of field paths to lists of values");
  } else {
    for (const auto& [path, values] : root["grid"].items()) {
      const std::string where = "grid." + path;
      const auto field = resolve_field_path(path);
      if (!field) {
        error(where, "\"" + path + "\" is not a plan field (write it as in `meshwork schema`, e.g. parallelism.tp)");
        continue;
      }
      const bool twice = std::any_of(out.spec.axes.begin(), out.spec.axes.end(),
                                     [&](const SweepAxis& a) { return a.path == field->canonical; });
      if (twice) {
        error(where, "the same field as another axis (" + field->canonical + ")");
        continue;
      }
      if (!values.is_array() || values.empty()) {
        error(where, "expected a non-empty list of values");
        continue;
      }
      out.spec.axes.push_back({field->canonical, field->keys, field->parent, values.get<std::vector<nlohmann::json>>(), path});
    }
  }
  // Axes in the file's order (the tree sorts keys; YAML lines say where each was written), so
  // that the CSV columns and the grid's fastest axis follow the file.
  std::stable_sort(out.spec.axes.begin(), out.spec.axes.end(), [&](const SweepAxis& a, const SweepAxis& b) {
    return line("grid." + a.written) < line("grid." + b.written);
  });
  if (root.contains("rank_by")) {
    const auto& r = root["rank_by"];
    const std::string v = r.is_string() ? r.get<std::string>() : "";
    if (v == "mfu") out.spec.rank_by = RankBy::mfu;
    else if (v == "time_to_train") out.spec.rank_by = RankBy::time_to_train;
    else if (v == "step_time") out.spec.rank_by = RankBy::step_time;
    else error("rank_by", "expected one of mfu | time_to_train | step_time");
  }
  if (root.contains("top")) {
    if (!root["top"].is_number_integer() || root["top"].get<std::int64_t>() < 1) error("top", "expected a positive integer");
    else out.spec.top = root["top"].get<std::int64_t>();
  }
  if (!out.diagnostics.has_errors() && out.spec.size() > kMaxSweepPoints) {
    error("grid", "the grid has more than " + std::to_string(kMaxSweepPoints) + " points; split it");
  }
  return out;
}

}  // namespace

SweepLoadResult load_sweep(const std::filesystem::path& file) { return load_sweep_document(read_document(file), file); }

SweepLoadResult load_sweep_text(std::string_view text, const std::filesystem::path& file) {
  // The format as read_document chooses it for the file: by extension, else detected.
  const std::string ext = file.extension().string();
  const Format format = ext == ".json" ? Format::json : (ext == ".yaml" || ext == ".yml") ? Format::yaml : Format::detect;
  return load_sweep_document(parse_document(text, format), file);
}

}  // namespace meshwork::plan
