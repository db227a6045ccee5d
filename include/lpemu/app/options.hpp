// Request fields shared by several commands: the conversion options (--rounding, --overflow,
// --seed, --sr-bits, --ftz, --daz) as named fields.
#pragma once

#include "lpemu/app/fields.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::app {

/// Reads rounding, overflow (names), seed, sr_bits, ftz and daz into `o`, keeping its values for
/// absent fields; bad names and an sr_bits outside 1..32 throw SpecError naming the field.
void read_convert_options(FieldReader& in, format::ConvertOptions& o);

}  // namespace lpemu::app
