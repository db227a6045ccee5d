// Area and energy of one multiply-accumulate lane from bit widths (docs/cost-and-systems.md).
//
// Unit: the full-adder equivalent (FA). Each component is a formula in bit widths:
//   multiplier   sa * sb                       (array multiplier: one FA per partial-product bit)
//   exponent     (ep) + ep*(1 + (n-1)/n)       (product-exponent adder; max tree and difference)
//   alignment    kMuxFa * W * ceil(log2 W)     (barrel shifter, one 2:1 mux per bit per stage)
//   adder tree   (n-1)/n * (W + ceil(log2 n))  (n-term tree, per lane)
//   accumulator  (A + kMuxFa*A*ceil(log2 A) + kFlopFa*acc_bits) / n, A = acc_sig + 3
//   normalise    (kMuxFa*A*ceil(log2 A) + A/2 + acc_sig) / n   (LZC, shift, round increment)
//   block scale  (scale exponent adder + scale multiplier + partial-sum scaling) / block_size
// with sa, sb the significand widths incl. the hidden bit (integers: their width),
// ep = max(ea, eb) + 2, n fused terms, W alignment bits. Integer datapaths have no
// exponent, alignment or normalisation stages; their tree width is sa + sb.
// Absolute figures use Horowitz, "Computing's energy problem (and what we can do about it)",
// ISSCC 2014, 45 nm, 0.9 V (see the constants). They are 45 nm figures, not the target's node.
#pragma once

#include <string>
#include <vector>

#include "lpemu/cost/cost_format.hpp"

namespace lpemu::datapath {
struct Datapath;
}

namespace lpemu::cost {

/// Horowitz ISSCC 2014 (45 nm): 32-bit int add 0.1 pJ -> 3.1 fJ per bit; 32-bit int multiply
/// 3.1 pJ / 1024 partial-product bits = 3.0 fJ. Energy of one FA-equivalent.
inline constexpr double kFaEnergyFj45nm = 3.1;
/// Horowitz ISSCC 2014 (45 nm) area table: 32-bit add 137 um^2 (4.3/bit), 8-bit add 36 um^2
/// (4.5/bit), 8-bit multiply 282 um^2 (4.4 per partial-product bit). Area of one FA-equivalent.
/// (Unverified: the area column was not found in a stored copy; the 32-bit add/multiply energies
/// 0.1/3.1 pJ and FP32 0.9/3.7 pJ were, as quoted by secondary sources.)
inline constexpr double kFaAreaUm2_45nm = 4.3;
/// No published source: a 2:1 mux taken as half a full adder (typical standard-cell ratio).
inline constexpr double kMuxFa = 0.5;
/// No published source: a flip-flop taken as one full adder.
inline constexpr double kFlopFa = 1.0;
/// Horowitz ISSCC 2014 (45 nm): DRAM access 1.3-2.6 nJ per 64 bits; the low end, per byte.
inline constexpr double kDramEnergyPjPerByte45nm = 1300.0 / 8.0;
/// Horowitz ISSCC 2014 (45 nm) reference energies used only as calibration checks (pJ).
inline constexpr double kHorowitzFp16MulPj = 1.1;  ///< 16-bit FP multiply
inline constexpr double kHorowitzFp32MulPj = 3.7;  ///< 32-bit FP multiply
inline constexpr double kHorowitzInt8MulPj = 0.2;  ///< 8-bit integer multiply

/// What the MAC model reads from a datapath record (formats/datapath/*.toml, lpemu::datapath::Datapath):
/// the same record the emulator runs, so the datapath that is emulated is the datapath that is priced.
struct MacDatapath {
  std::string name;
  std::string source;
  CostFormat a, b;          ///< the record's input formats, with its block scales (scale_block, scale)
  int fused_terms = 4;      ///< n: products summed per step (a record's 0 = all of K is priced as 64)
  int alignment_bits = 27;  ///< W: F + 1 (+ 1 with a sticky bit); exact alignment: the span of every product
  std::string accumulator = "fp32";
  ElementWidth acc;         ///< accumulator widths (fraction bits as the record keeps them)
  int promote_every = 0;    ///< products per promotion into `promotion` (0: none)
  ElementWidth promotion;   ///< the wider accumulator promoted into
  bool unverified = false;  ///< the record lists parameters its sources leave open
};

/// The MAC model's view of a datapath record (n, W, accumulator, promotion, inputs and scales).
MacDatapath mac_datapath(const datapath::Datapath& dp);

/// One named component of a MAC lane.
struct MacComponent {
  std::string name;
  double fa = 0;        ///< full-adder equivalents per MAC lane
  std::string formula;  ///< the formula with the numbers filled in
};

/// Per-lane cost of a MAC design.
struct MacCost {
  std::string a_format, b_format, datapath;
  std::vector<MacComponent> parts;
  double total_fa = 0;

  /// Area per MAC lane at 45 nm (um^2), from kFaAreaUm2_45nm.
  double area_um2_45nm() const { return total_fa * kFaAreaUm2_45nm; }
  /// Energy per MAC at 45 nm (pJ), from kFaEnergyFj45nm.
  double energy_pj_45nm() const { return total_fa * kFaEnergyFj45nm / 1000.0; }
  /// The component called `name`, or 0.
  double part(const std::string& name) const;
};

/// Cost of one MAC lane multiplying a `a` by a `b` element on datapath `dp` (a what-if: other inputs
/// than the record's, with the record's n, W, accumulator and promotion).
MacCost mac_cost(const CostFormat& a, const CostFormat& b, const MacDatapath& dp);
/// Cost of one MAC lane of `dp` as the record describes it (its own input formats and scales).
MacCost mac_cost(const MacDatapath& dp);

/// How many MACs of cost `x` fit in the area of `n_y` MACs of cost `y` (rounded down).
long long iso_area_count(const MacCost& x, const MacCost& y, long long n_y);

}  // namespace lpemu::cost
