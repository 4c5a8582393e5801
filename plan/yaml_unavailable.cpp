// parse_yaml in a build without libyaml (MESHWORK_GPU_ONLY on a machine without Debian's
// packages): JSON plans load as ever; a YAML plan gets an error saying why, not a crash.
#include "plan/yaml_reader.hpp"

namespace meshwork::plan {

DocumentResult parse_yaml(std::string_view) {
  DocumentResult out;
  out.diagnostics.error("", "this build reads JSON plans only (it was built without libyaml); convert the plan with `meshwork show PLAN --json`");
  return out;
}

}  // namespace meshwork::plan
