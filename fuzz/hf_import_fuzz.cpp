// libFuzzer target for the Hugging Face importer (`meshwork import-hf`, `model.hf_config`):
// any bytes give a model or diagnostics, never a crash, a hang or a sanitizer report; a model
// that imports lies within the plan's own checks' reach (validate may refuse it, not crash).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "plan/document.hpp"
#include "plan/hf_import.hpp"
#include "plan/validate.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshwork::plan;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // As import_hf_config_file reads a file: the document checks, then the importer.
  const DocumentResult doc = parse_document(text, Format::json);
  if (!doc.document) return 0;
  Plan plan;
  Diagnostics diags;
  if (import_hf_config(doc.document->root, plan.model, diags)) (void)validate(plan);
  return 0;
}
