#pragma once
// Named hardware and model presets, each with the source of its numbers. `meshwork presets`
// lists them; a plan names one with `gpu: h100-sxm` or `model: {preset: llama3-70b}`.

#include <span>
#include <string_view>

#include "plan/plan.hpp"

namespace meshwork::plan {

struct GpuPreset {
  std::string_view key;
  GpuSpec spec;
  std::string_view source;
};

struct ModelPreset {
  std::string_view key;
  ModelConfig model;
  std::string_view source;
};

std::span<const GpuPreset> gpu_presets();
std::span<const ModelPreset> model_presets();

const GpuPreset* find_gpu_preset(std::string_view key);
const ModelPreset* find_model_preset(std::string_view key);

// A GPU's architecture, from its name as the presets spell it, in any case ("a100...",
// "h100...", "h200...", "h800...", "b200..."); other: any other name (a custom spec, a CPU host).
enum class GpuGeneration { ampere, hopper, blackwell, other };
GpuGeneration gpu_generation(const GpuSpec& gpu);
// A GPU rather than a CPU host: any 16- or 8-bit tensor peak.
bool has_tensor_peak(const GpuSpec& gpu);

}  // namespace meshwork::plan
