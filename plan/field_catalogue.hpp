#pragma once
// Every scalar field of the plan schema as a flat list, in schema order, with what an editor
// needs to offer it: its canonical path, its kind, its choices, unit, bounds and documentation.
// A visitor over schema.hpp (like the README's field reference), so forms built from it follow
// the schema without a hand-kept copy. Lists of sections (failures.events, ...) are not
// scalars: they are named in `lists` and edited as text.

#include <string>
#include <vector>

#include "plan/units.hpp"

namespace meshwork::plan {

enum class FieldKind { integer, number, boolean, text, choice, choice_list, duration_or_auto, preset, path };

struct FieldEntry {
  std::string path;     // "parallelism.tensor_model_parallel_size"
  std::string section;  // "parallelism", "cluster.gpu", "" for the plan's own fields
  std::string key;      // "tensor_model_parallel_size"
  std::string aliases;  // "tp"
  FieldKind kind = FieldKind::text;
  std::vector<std::string> choices;  // choice and choice_list: the enum's names
  Unit unit = Unit::none;
  double min = 0, max = 0;           // bounds for integer and number (-inf/inf when open)
  bool required = false;
  std::string doc;
};

struct FieldCatalogue {
  std::vector<FieldEntry> fields;
  std::vector<std::string> sections;  // every section path in schema order ("" first)
  std::vector<std::string> lists;     // "failures.events", ...
};

const FieldCatalogue& field_catalogue();

}  // namespace meshwork::plan
