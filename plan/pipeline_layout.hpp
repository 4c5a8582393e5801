#pragma once
// Megatron-LM's pipeline layout string (--pipeline-model-parallel-layout, megatron/core/
// transformer/pipeline_parallel_layer_layout.py): the layers of every virtual pipeline stage,
// in virtual-stage order (chunk c of stage s is virtual stage c * pp + s), separated by `|`.
// `E` is the embedding, `t` a decoder (transformer) layer, `m` a multi-token-prediction layer,
// `L` the LM head and loss; `(...)*n` and `x*n` repeat; commas are cosmetic. Megatron's
// example for DeepSeek-V3 on 16 stages x 2 chunks: "Et*3|(tt|)*29,m|L".

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshwork::plan {

// The virtual stages of a layout, each as its layer letters ("Et", "tt", "", "L"), with the
// repetitions unrolled (nested parentheses too, which Megatron's regular expressions do not
// take). nullopt and `error` on a character outside E, t, m, L, |, (, ), *, digits, commas and
// blanks; on an unbalanced parenthesis or a `*` without a count; or when the unrolled layout
// would exceed `max_letters` (a guard against "(t*99999)*99999").
std::optional<std::vector<std::string>> parse_pipeline_layout(std::string_view text, std::string& error,
                                                              std::size_t max_letters = 1 << 20);

}  // namespace meshwork::plan
