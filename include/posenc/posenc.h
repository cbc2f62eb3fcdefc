#pragma once

/// posenc: positional encodings for LibTorch.
///
/// `#include <posenc/posenc.h>` brings in every public module, options struct and function of the
/// `posenc::posenc` library. Two parts are opt-in, so that the umbrella pulls in neither
/// TorchScript's (JIT) headers nor a second library:
///  - exporting modules to TorchScript: `#include <posenc/export.h>` (`posenc::to_torchscript`,
///    part of `posenc::posenc`);
///  - loading Python state dicts: `#include <posenc/io/state_dict.h>` and link the target
///    `posenc::io` (`posenc::load_state_dict`).

#include <posenc/enums.h>
#include <posenc/functional/attention_bias.h>
#include <posenc/functional/positional_encoding.h>
#include <posenc/functional/positions.h>
#include <posenc/functional/rotary_embedding.h>
#include <posenc/functional/token_and_position_embedding.h>
#include <posenc/functional/vision.h>
#include <posenc/modules/attention_bias.h>
#include <posenc/modules/encoding_base.h>
#include <posenc/modules/learned_positional_embedding.h>
#include <posenc/modules/positional_encoding.h>
#include <posenc/modules/rotary_embedding.h>
#include <posenc/modules/token_and_position_embedding.h>
#include <posenc/modules/vision.h>
#include <posenc/ops.h>
#include <posenc/options/attention_bias.h>
#include <posenc/options/learned_positional_embedding.h>
#include <posenc/options/positional_encoding.h>
#include <posenc/options/rotary_embedding.h>
#include <posenc/options/token_and_position_embedding.h>
#include <posenc/options/vision.h>
#include <posenc/version.h>
