#include "lpemu/core/core.hpp"

#include <utility>

#include "core/embedded_data.hpp"
#include "io/record_files.hpp"
#include "io/toml.hpp"
#include "io/toml_util.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::core {
namespace {

using io::detail::TableReader;

constexpr lpemu::detail::EnumName<Dataflow> kDataflows[] = {{"os", Dataflow::os},
                                                            {"ws", Dataflow::ws},
                                                            {"is", Dataflow::is},
                                                            {"output_stationary", Dataflow::os},
                                                            {"weight_stationary", Dataflow::ws},
                                                            {"input_stationary", Dataflow::is}};
constexpr lpemu::detail::EnumName<ArrayKind> kKinds[] = {{"systolic", ArrayKind::systolic},
                                                         {"dot", ArrayKind::dot}};
constexpr lpemu::detail::EnumName<Tiling> kTilings[] = {{"folds", Tiling::folds}, {"search", Tiling::search}};
constexpr lpemu::detail::EnumName<FirstFill> kFirstFills[] = {{"hidden", FirstFill::hidden},
                                                              {"exposed", FirstFill::exposed}};

Scratchpad read_pad(const TableReader& r) {
  r.only({"kib", "banks", "words_per_cycle"});
  Scratchpad s;
  s.kib = r.required_number("kib", 1.0 / 1024, 1e9, "a capacity in KiB (> 0)");
  s.banks = static_cast<int>(r.integer("banks", 1, 1, 1 << 20, "a positive number of banks"));
  s.words_per_cycle = static_cast<int>(r.integer(
      "words_per_cycle", 0, 0, 1 << 20, "words per bank per cycle (>= 0; 0 = as many as the array asks)"));
  return s;
}

void write_pad(io::detail::TomlWriter& w, std::string_view header, const Scratchpad& s) {
  w.table(header)
      .number("kib", s.kib)
      .integer("banks", s.banks)
      .integer("words_per_cycle", s.words_per_cycle);
}

// The built-in cores (data/cores/*.toml, embedded) and where users add theirs (DIR/cores/*.toml).
constexpr io::detail::RecordKind kCoreRecords{"core", "cores", ""};

std::vector<io::detail::RecordFile> builtin_cores() {
  std::vector<io::detail::RecordFile> out;
  for (const auto& f : detail::embedded_core_data())
    out.push_back({f.text, "builtin:data/" + std::string(f.path)});
  return out;
}

}  // namespace

std::string_view to_string(Dataflow d) { return lpemu::detail::enum_name(kDataflows, d); }

std::string_view to_string(FirstFill f) { return lpemu::detail::enum_name(kFirstFills, f); }

std::string_view to_string(ArrayKind k) { return lpemu::detail::enum_name(kKinds, k); }

std::string_view to_string(Tiling t) { return lpemu::detail::enum_name(kTilings, t); }

Dataflow parse_dataflow(std::string_view text) {
  if (const auto v = lpemu::detail::enum_value(kDataflows, text)) return *v;
  throw SpecError("dataflow '" + std::string(text) + "': expected one of " +
                  lpemu::detail::join_names(lpemu::detail::enum_spellings(kDataflows, "\""), " or "));
}

Core parse_core_toml(std::string_view text, std::string_view origin) {
  const toml::table t = io::detail::parse(text, origin);
  const TableReader r(t, origin);
  r.only({"name", "description", "source", "clock_ghz", "array", "sram", "dram", "l2", "softmax", "energy"});
  Core c;
  c.name = r.required_str("name");
  c.description = r.str("description");
  c.source = r.required_str("source");
  c.clock_ghz = r.required_number("clock_ghz", 1e-6, 1e6, "a clock in GHz (> 0)");

  const TableReader a = r.required_sub("array");
  a.only({"kind", "rows", "cols", "units", "terms", "dataflow", "lane", "port_bits", "pack", "tiling"});
  c.kind = a.choice("kind", ArrayKind::systolic, kKinds);
  c.rows = static_cast<int>(a.required_integer("rows", 1, 1 << 16, "a positive number of rows"));
  c.cols = static_cast<int>(a.required_integer("cols", 1, 1 << 16, "a positive number of columns"));
  if (!a.has("dataflow")) a.fail("dataflow", "\"os\", \"ws\" or \"is\"");
  c.dataflow = a.choice("dataflow", Dataflow::os, kDataflows);
  if (c.kind == ArrayKind::dot) {
    // Each unit accumulates its outputs over K: the array is output stationary.
    if (c.dataflow != Dataflow::os)
      a.fail("dataflow", "\"os\" for kind = \"dot\" (the accumulators hold the outputs)");
    c.dot_units = static_cast<int>(a.required_integer("units", 1, 1 << 24, "a positive number of dot units"));
    c.dot_terms =
        static_cast<int>(a.required_integer("terms", 1, 4096, "products per unit per cycle (>= 1)"));
  } else if (a.has("units") || a.has("terms")) {
    a.fail(a.has("units") ? "units" : "terms", "kind = \"dot\" (a systolic array has rows x cols lanes)");
  }
  c.lane = a.required_str("lane");
  c.port_bits = static_cast<int>(
      a.integer("port_bits", 0, 0, 4096, "operand bits per lane per cycle (>= 0; 0 = one element)"));
  c.tiling = a.choice("tiling", Tiling::search, kTilings);
  for (const TableReader& p : a.tables("pack")) {
    p.only({"bits", "products"});
    const PackRule rule{
        static_cast<int>(p.required_integer("bits", 1, 64, "element bits in 1..64")),
        static_cast<int>(p.required_integer("products", 1, 4096, "products per cycle (>= 1)"))};
    for (const PackRule& q : c.pack) {
      if (q.bits == rule.bits) p.fail("bits", std::to_string(rule.bits), "a width not listed before");
    }
    c.pack.push_back(rule);
  }

  const TableReader s = r.required_sub("sram");
  s.only({"a", "b", "c", "word_bits", "double_buffered", "output_bits"});
  c.a = read_pad(s.required_sub("a"));
  c.b = read_pad(s.required_sub("b"));
  c.c = read_pad(s.required_sub("c"));
  c.word_bits = static_cast<int>(s.integer("word_bits", 8, 1, 4096, "bits per scratchpad word (>= 1)"));
  c.double_buffered = s.boolean("double_buffered", true);
  c.output_bits = static_cast<int>(
      s.integer("output_bits", 0, 0, 64, "bits per output element (0 = the lane's output format)"));

  const TableReader d = r.required_sub("dram");
  d.only({"bytes_per_cycle", "latency_cycles", "first_fill"});
  c.dram_bytes_per_cycle =
      d.required_number("bytes_per_cycle", 1e-9, 1e12, "a bandwidth in bytes per cycle (> 0)");
  c.dram_latency_cycles =
      static_cast<int>(d.integer("latency_cycles", 0, 0, 1 << 30, "a latency in cycles (>= 0)"));
  c.first_fill = d.choice("first_fill", FirstFill::exposed, kFirstFills);

  if (r.has("softmax")) {
    const TableReader sm = r.required_sub("softmax");
    sm.only({"elements_per_cycle", "latency_cycles", "pj_per_element"});
    c.softmax.elements_per_cycle =
        sm.required_number("elements_per_cycle", 1e-9, 1e12, "scores per cycle (> 0)");
    c.softmax.latency_cycles =
        static_cast<int>(sm.integer("latency_cycles", 0, 0, 1 << 30, "a latency in cycles (>= 0)"));
    c.softmax.pj_per_element = sm.number("pj_per_element", 0, 0, 1e9, "an energy in pJ (>= 0)");
  }

  if (r.has("l2")) {
    const TableReader l2 = r.required_sub("l2");
    l2.only({"kib", "bytes_per_cycle", "pj_per_byte"});
    c.l2.kib = l2.required_number("kib", 1.0 / 1024, 1e12, "a capacity in KiB (> 0)");
    c.l2.bytes_per_cycle =
        l2.required_number("bytes_per_cycle", 1e-9, 1e12, "a bandwidth in bytes per cycle (> 0)");
    c.l2.pj_per_byte = l2.number("pj_per_byte", 0, 0, 1e9, "an energy in pJ (>= 0)");
  }

  const TableReader e = r.sub("energy");
  e.only({"mac_pj", "sram_read_pj_per_byte", "sram_write_pj_per_byte", "dram_pj_per_byte"});
  constexpr std::string_view kPj = "an energy in pJ (>= 0)";
  c.mac_pj = e.number("mac_pj", 0, 0, 1e9, kPj);
  c.sram_read_pj_per_byte = e.number("sram_read_pj_per_byte", 0, 0, 1e9, kPj);
  c.sram_write_pj_per_byte = e.number("sram_write_pj_per_byte", 0, 0, 1e9, kPj);
  c.dram_pj_per_byte = e.number("dram_pj_per_byte", 0, 0, 1e9, kPj);
  return c;
}

std::string to_toml(const Core& c) {
  io::detail::TomlWriter w;
  w.str("name", c.name).str_if("description", c.description).str("source", c.source);
  w.number("clock_ghz", c.clock_ghz);
  w.table("array").str("kind", to_string(c.kind)).integer("rows", c.rows).integer("cols", c.cols);
  if (c.kind == ArrayKind::dot) w.integer("units", c.dot_units).integer("terms", c.dot_terms);
  w.str("dataflow", to_string(c.dataflow));
  w.str("lane", c.lane).integer("port_bits", c.port_bits).str("tiling", to_string(c.tiling));
  for (const PackRule& p : c.pack)
    w.array_table("array.pack").integer("bits", p.bits).integer("products", p.products);
  w.table("sram").integer("word_bits", c.word_bits).boolean("double_buffered", c.double_buffered);
  w.integer("output_bits", c.output_bits);
  write_pad(w, "sram.a", c.a);
  write_pad(w, "sram.b", c.b);
  write_pad(w, "sram.c", c.c);
  w.table("dram")
      .number("bytes_per_cycle", c.dram_bytes_per_cycle)
      .integer("latency_cycles", c.dram_latency_cycles);
  w.str("first_fill", to_string(c.first_fill));
  if (c.l2.kib > 0) {
    w.table("l2")
        .number("kib", c.l2.kib)
        .number("bytes_per_cycle", c.l2.bytes_per_cycle)
        .number("pj_per_byte", c.l2.pj_per_byte);
  }
  if (c.softmax.elements_per_cycle > 0) {
    w.table("softmax")
        .number("elements_per_cycle", c.softmax.elements_per_cycle)
        .integer("latency_cycles", c.softmax.latency_cycles)
        .number("pj_per_element", c.softmax.pj_per_element);
  }
  w.table("energy").number("mac_pj", c.mac_pj).number("sram_read_pj_per_byte", c.sram_read_pj_per_byte);
  w.number("sram_write_pj_per_byte", c.sram_write_pj_per_byte).number("dram_pj_per_byte", c.dram_pj_per_byte);
  return w.text();
}

Core load_core(std::string_view name, const std::vector<std::filesystem::path>& dirs) {
  const io::detail::RecordFile f = io::detail::find_record(kCoreRecords, name, builtin_cores(), dirs);
  return parse_core_toml(f.text, f.origin);
}

std::vector<std::string> core_names(const std::vector<std::filesystem::path>& dirs) {
  return io::detail::record_names(kCoreRecords, builtin_cores(), dirs);
}

Core with_name(Core c, std::string name, std::string description) {
  c.name = std::move(name);
  c.description = std::move(description);
  return c;
}

Core with_array(Core c, int rows, int cols) {
  if (rows < 1 || cols < 1) {
    throw SpecError("core '" + c.name + "': array " + std::to_string(rows) + " x " + std::to_string(cols) +
                    ": expected positive rows and columns");
  }
  c.rows = rows;
  c.cols = cols;
  return c;
}

Core with_scratchpads_scaled(Core c, double factor) {
  if (!(factor > 0)) throw SpecError("core '" + c.name + "': scratchpad factor: expected a number > 0");
  c.a.kib *= factor;
  c.b.kib *= factor;
  c.c.kib *= factor;
  return c;
}

Core with_lane(Core c, std::string lane, int port_bits) {
  if (port_bits < 0) throw SpecError("core '" + c.name + "': port_bits: expected an integer >= 0");
  c.lane = std::move(lane);
  c.port_bits = port_bits;
  return c;
}

Core with_dataflow(Core c, Dataflow d) {
  if (c.kind == ArrayKind::dot && d != Dataflow::os) {
    throw SpecError("core '" + c.name + "': dataflow '" + std::string(to_string(d)) +
                    "': a dot-unit array is output stationary; expected \"os\"");
  }
  c.dataflow = d;
  return c;
}

}  // namespace lpemu::core
