#pragma once

/// posenc: positional encodings for LibTorch.
///
/// `#include <posenc/posenc.h>` brings in every public module, options struct and function.

#include <posenc/enums.h>
#include <posenc/export.h>
#include <posenc/functional/positional_encoding.h>
#include <posenc/functional/positions.h>
#include <posenc/functional/rotary_embedding.h>
#include <posenc/modules/learned_positional_embedding.h>
#include <posenc/modules/positional_encoding.h>
#include <posenc/modules/rotary_embedding.h>
#include <posenc/modules/token_and_position_embedding.h>
#include <posenc/ops.h>
#include <posenc/options/learned_positional_embedding.h>
#include <posenc/options/positional_encoding.h>
#include <posenc/options/rotary_embedding.h>
#include <posenc/options/token_and_position_embedding.h>
#include <posenc/serialize.h>
#include <posenc/version.h>
