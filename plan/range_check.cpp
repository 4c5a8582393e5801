// The per-field rules of schema.hpp (bounds, required fields) checked on a Plan in memory, so
// that plans built by code (the GUI, sweeps) are held to the same rules as plan files.
#include "plan/validate.hpp"

#include <cmath>
#include <sstream>

#include "plan/diagnostics.hpp"
#include "plan/schema.hpp"

namespace meshwork::plan {
namespace {

std::string number_text(double v) {
  std::ostringstream s;
  s.precision(12);
  s << v;
  return s.str();
}

class RangeChecker {
 public:
  RangeChecker(std::string path, Diagnostics& diags) : path_(std::move(path)), diags_(diags) {}

  void field(std::int64_t& v, const FieldInfo& info) { check(static_cast<double>(v), info); }
  void field(double& v, const FieldInfo& info) {
    if (!std::isfinite(v)) {
      diags_.error(join_path(path_, info.key), "must be a finite number");
      return;
    }
    check(v, info);
  }
  void field(std::string& v, const FieldInfo& info) {
    if (info.required && v.empty()) diags_.error(join_path(path_, info.key), "required field is missing");
  }
  void field(CheckpointInterval& v, const FieldInfo& info) {
    if (!v.automatic) field(v.seconds, info);
  }
  template <class T>
  void field(T&, const FieldInfo&) {}  // bools and enums hold only valid values

  template <class S>
  void section(S& member, const FieldInfo& info) {
    RangeChecker child(join_path(path_, info.key), diags_);
    describe(child, member);
  }

  template <class S>
  void list(std::vector<S>& member, const FieldInfo& info) {
    for (std::size_t i = 0; i < member.size(); ++i) {
      RangeChecker child(index_path(join_path(path_, info.key), i), diags_);
      describe(child, member[i]);
    }
  }

  template <class S>
  void preset(S&, const FieldInfo&) {}
  void hf_config(ModelConfig&, const FieldInfo&) {}

 private:
  void check(double v, const FieldInfo& info) {
    const std::string path = join_path(path_, info.key);
    if (info.required && v == 0) {
      diags_.error(path, "required field is missing");
      return;
    }
    // A derived field still at 0 could not be derived; the rule that derives it says why.
    if (!info.default_text.empty() && v == 0) return;
    check_bounds(v, info, path, diags_);
  }

  std::string path_;
  Diagnostics& diags_;
};

}  // namespace

void check_bounds(double v, const FieldInfo& info, const std::string& path, Diagnostics& diags) {
  const std::string unit = symbol(info.unit).empty() ? "" : " " + std::string(symbol(info.unit));
  if (info.min_exclusive ? !(v > info.min) : !(v >= info.min)) {
    diags.error(path, std::string("must be ") + (info.min_exclusive ? "greater than " : "at least ") +
                          number_text(info.min) + unit + ", got " + number_text(v));
  } else if (!(v <= info.max)) {
    diags.error(path, "must be at most " + number_text(info.max) + unit + ", got " + number_text(v));
  }
}

void check_field_ranges(const Plan& plan, Diagnostics& diags) {
  Plan copy = plan;
  RangeChecker checker("", diags);
  describe(checker, copy);
}

}  // namespace meshwork::plan
