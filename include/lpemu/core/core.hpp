// Compute cores as data: a systolic MAC array (rows x cols of lanes), its dataflow, its scratchpads,
// its DRAM interface, its clock and its access energies; the lane is a datapath record
// (lpemu/datapath/datapath.hpp). A core is a TOML file under data/cores/ (embedded at build time)
// or DIR/cores/. The dataflows and the fold model follow SCALE-Sim v2 (Samajdar et al., "A
// Systematic Methodology for Characterizing Scalability of DNN Accelerators using SCALE-Sim",
// ISPASS 2020; https://github.com/scalesim-project/scale-sim-v2).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace lpemu::core {

/// Which operand stays in the array while the others stream through it (SCALE-Sim v2's "os",
/// "ws", "is").
enum class Dataflow : std::uint8_t {
  os,  ///< output stationary: each lane accumulates one output over all of K
  ws,  ///< weight stationary: a K x N tile of B is held, A streams, partial sums flow down
  is,  ///< input stationary: a K x M tile of A is held, B streams, partial sums flow down
};

/// Whether the first fill of each scratchpad is counted in a GEMM's cycles.
enum class FirstFill : std::uint8_t {
  hidden,   ///< each operand's first buffer-full is resident before cycle 0 (SCALE-Sim's convention)
  exposed,  ///< the first fold's operands are loaded from DRAM after cycle 0, with the latency
};

/// One operand's scratchpad.
struct Scratchpad {
  double kib = 0;           ///< capacity in KiB (1024 bytes)
  int banks = 1;            ///< independent banks
  int words_per_cycle = 0;  ///< words each bank delivers per cycle; 0 = as many as the array asks
  friend bool operator==(const Scratchpad&, const Scratchpad&) = default;
};

/// Products per cycle a lane forms from inputs of a given width, where the lane's design says so
/// rather than its port width (an FP8 lane that also takes FP6 at 2x and FP4 at 4x).
struct PackRule {
  int bits = 0;      ///< the widest input's element bits
  int products = 1;  ///< products per lane per cycle
  friend bool operator==(const PackRule&, const PackRule&) = default;
};

/// What the array is made of.
enum class ArrayKind : std::uint8_t {
  systolic,  ///< rows x cols lanes passing operands to their neighbours (SCALE-Sim's array)
  dot,       ///< tensor-core style: `dot_units` units, each an n-term dot product per cycle into an
             ///< accumulator of a rows x cols output tile
};

/// How a GEMM is mapped onto the array.
enum class Tiling : std::uint8_t {
  folds,   ///< the array's folds only, in the better of two fold orders (SCALE-Sim's mapping)
  search,  ///< also splits the streamed dimension (M for ws, N for is) so that partial sums stay on chip
};

/// The unit attention's scores pass through between QK^T and PV: each row's maximum, exponentials,
/// sum and normalisation.
struct SoftmaxUnit {
  double elements_per_cycle = 0;  ///< scores normalised per cycle; 0 = no softmax unit modelled
  int latency_cycles = 0;         ///< pipeline latency, paid once per attention instance
  double pj_per_element = 0;      ///< energy per score (maximum, exponential, sum, normalisation)
  friend bool operator==(const SoftmaxUnit&, const SoftmaxUnit&) = default;
};

/// A cache between the scratchpads and DRAM (a GPU's L2): scratchpad fills pass through it, and an
/// operand the reuse model re-reads is served from it when it fits.
struct L2Cache {
  double kib = 0;              ///< capacity in KiB; 0 = no L2 (scratchpads fill straight from DRAM)
  double bytes_per_cycle = 0;  ///< bandwidth to the scratchpads in bytes per core cycle
  double pj_per_byte = 0;      ///< energy per byte read from it
  friend bool operator==(const L2Cache&, const L2Cache&) = default;
};

/// A compute core: every parameter the cycle model reads.
struct Core {
  std::string name, description, source;
  double clock_ghz = 1;
  // [array]
  ArrayKind kind = ArrayKind::systolic;
  int rows = 1, cols = 1;  ///< systolic: the lanes; dot: the output tile the accumulators hold
  int dot_units = 0;       ///< dot: n-term dot-product units (all subcores together)
  int dot_terms = 0;       ///< dot: products each unit sums per cycle at one product per term
  Dataflow dataflow = Dataflow::os;
  std::string lane;   ///< datapath record a lane runs
  int port_bits = 0;  ///< operand bits a lane takes per cycle; 0 = one element of the lane's widest input
  std::vector<PackRule> pack;  ///< [[array.pack]]: products per cycle by input width, before port_bits
  Tiling tiling = Tiling::search;
  // [sram]
  Scratchpad a, b, c;  ///< inputs A [M,K], weights B [K,N], outputs and partial sums C [M,N]
  int word_bits = 8;   ///< bits per scratchpad word
  bool double_buffered = true;
  int output_bits = 0;  ///< bits of each C element written out; 0 = the lane's output format
  // [dram]
  double dram_bytes_per_cycle = 0;  ///< DRAM bandwidth in bytes per core cycle
  int dram_latency_cycles = 0;
  FirstFill first_fill = FirstFill::exposed;
  L2Cache l2;           ///< [l2]
  SoftmaxUnit softmax;  ///< [softmax]
  // [energy] picojoules
  double mac_pj = 0;  ///< per multiply-accumulate
  double sram_read_pj_per_byte = 0, sram_write_pj_per_byte = 0, dram_pj_per_byte = 0;
  /// Every field equal.
  friend bool operator==(const Core&, const Core&) = default;
};

/// Parses one core TOML document; errors name origin:line, the field, the value and what was
/// expected (the lane's datapath is looked up later, by the model).
Core parse_core_toml(std::string_view text, std::string_view origin);
/// The core TOML document of `c`, the exact inverse of parse_core_toml.
std::string to_toml(const Core& c);
/// The core called `name` (built-in, or DIR/cores/NAME.toml for each of `dirs`), or the file
/// `name` if it ends in ".toml"; throws UnknownNameError with the closest names.
Core load_core(std::string_view name, const std::vector<std::filesystem::path>& dirs = {});
/// Names of the built-in cores and those under DIR/cores/ for each of `dirs`, sorted.
std::vector<std::string> core_names(const std::vector<std::filesystem::path>& dirs = {});
/// `c` under another name and description.
Core with_name(Core c, std::string name, std::string description);
/// `c` with a rows x cols array.
Core with_array(Core c, int rows, int cols);
/// `c` with every scratchpad's capacity multiplied by `factor`.
Core with_scratchpads_scaled(Core c, double factor);
/// `c` whose lanes run datapath `lane`, taking `port_bits` operand bits per cycle (0 = one element).
Core with_lane(Core c, std::string lane, int port_bits);
/// `c` with dataflow `d`.
Core with_dataflow(Core c, Dataflow d);

/// TOML spelling of a Dataflow ("os", "ws", "is").
std::string_view to_string(Dataflow d);
/// The dataflow spelled `text`; throws SpecError naming the spellings.
Dataflow parse_dataflow(std::string_view text);
/// TOML spelling of a FirstFill ("hidden", "exposed").
std::string_view to_string(FirstFill f);
/// TOML spelling of an ArrayKind ("systolic", "dot").
std::string_view to_string(ArrayKind k);
/// TOML spelling of a Tiling ("folds", "search").
std::string_view to_string(Tiling t);

}  // namespace lpemu::core
