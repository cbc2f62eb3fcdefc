#pragma once

/// posenc: positional encodings for LibTorch.
///
/// `#include <posenc/posenc.h>` brings in every public module, options struct and function.

#include <posenc/export.h>
#include <posenc/functional/positional_encoding.h>
#include <posenc/modules/positional_encoding.h>
#include <posenc/ops.h>
#include <posenc/options/positional_encoding.h>
#include <posenc/serialize.h>
#include <posenc/version.h>
