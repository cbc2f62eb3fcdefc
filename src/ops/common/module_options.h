#pragma once

// The checks of a module's options, once for both front ends: the C++ module's reset() calls
// check_options before it allocates or registers anything, and posenc.nn's constructors call the
// posenc::check_module_options operator (src/ops/common/module_options.cpp), which reads the same options
// from JSON and calls the same function. Messages name the module (its kName),
// from the CallerScope the caller opens.
// RotaryEmbedding's options are checked by ops::rotary_module_call (ops/rotary/module.h).

#include <posenc/options/attention_bias.h>
#include <posenc/options/learned_positional_embedding.h>
#include <posenc/options/positional_encoding.h>
#include <posenc/options/token_and_position_embedding.h>
#include <posenc/options/vision.h>

namespace posenc {
namespace ops {

/// How a message spells an option's value: as C++ (`PositionKind::kSinusoidal`) or as posenc.nn's
/// keyword arguments (`positions='sinusoidal'`).
enum class OptionSpelling { kCpp, kPython };

void check_options(const PositionalEncodingOptions& options);
void check_options(const LearnedPositionalEmbeddingOptions& options);
/// Also the position table's options (those its PositionalEncoding or LearnedPositionalEmbedding
/// checks), under the caller's name, so that every table is checked before the first is allocated.
void check_options(const TokenAndPositionEmbeddingOptions& options,
                   OptionSpelling spelling = OptionSpelling::kCpp);
void check_options(const TimestepEmbeddingOptions& options);
void check_options(const TimestepEmbedderOptions& options);
void check_options(const AxialRotaryEmbeddingOptions& options);
void check_options(const VisionRotaryEmbeddingOptions& options);
void check_options(const ALiBiOptions& options);
void check_options(const AttentionTemperatureOptions& options);
void check_options(const RelativePositionBiasOptions& options);
void check_options(const RelPositionalEncodingOptions& options);
void check_options(const RelPositionMultiheadAttentionOptions& options);

} // namespace ops
} // namespace posenc
