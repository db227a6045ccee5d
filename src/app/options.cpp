#include "lpemu/app/options.hpp"

#include <string>

#include "lpemu/error.hpp"

namespace lpemu::app {

void read_convert_options(FieldReader& in, format::ConvertOptions& o) {
  std::string rounding, overflow;
  in.read("rounding", rounding);
  in.read("overflow", overflow);
  if (!rounding.empty()) o.rounding = format::parse_rounding(rounding);
  if (!overflow.empty()) o.overflow = format::parse_overflow(overflow);
  in.read("seed", o.seed);
  in.read("sr_bits", o.sr_bits);
  in.read("ftz", o.flush_subnormal_outputs);
  in.read("daz", o.flush_subnormal_inputs);
  if (o.sr_bits < 1 || o.sr_bits > 32)
    throw SpecError("sr_bits = " + std::to_string(o.sr_bits) + ": expected 1..32");
}

}  // namespace lpemu::app
