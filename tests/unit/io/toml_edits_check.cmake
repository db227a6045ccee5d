# "A record's TOML is read and written only by its own layer" (docs/records.md), checked by
# pattern over every C++ file under src/ (cmake -DSRC=<repo>/src -P toml_edits_check.cmake):
#
#  1. toml++ edits: a call insert_or_assign / insert / emplace / erase whose first argument is a
#     string literal ("key") edits a TOML table by field name. Each one must be listed in
#     kAllowedEdits below as file:key with the document it edits, in the layer that owns it.
#  2. TOML text by field name: a string literal that starts (or continues after a \n) with
#     `key = ` or a `[table]` / `[[table]]` header whose key (or any dotted part of the header) is
#     a field of a record (kOwned below) is allowed only in the files of the layer that owns that
#     record (src/<layer>/), or when listed in kAllowedText.
# Either rule broken: the script fails, naming file, key and owning layer.
cmake_minimum_required(VERSION 3.20)
if(NOT SRC)
  message(FATAL_ERROR "usage: cmake -DSRC=<repo>/src -P toml_edits_check.cmake")
endif()

# Record fields by owning layer (the readers' keys that name a record's own fields; generic words
# such as name, description, source, format, rounding, seed and sr_bits are left out).
set(kOwned_format exponent_bits mantissa_bits bias specials subnormals zero symmetric fraction_bits)
set(kOwned_block element scale granularity block_size axis tile scale_rule search_radius scale_rounding
    nonfinite scale_overflow subnormal_inputs signed_zero tensor_scale)
set(kOwned_datapath inputs products block alignment accumulator promotion order fused_terms addend addend_emin
    extra_bits exponent_floor sticky scale_application scale_block group_size flush_subnormals late_rounding
    late_sr_bits late_seed normalisation chunks fraction_bits scale every)
set(kOwned_engine roles override defaults compute gemm attention_gemm layers ftz daz weights linear_input q k v
    kv_cache scores probs attn_output mlp_hidden residual lm_head lm_head_input logits expert_weights
    expert_input expert_hidden router_weights router_input router_logits grad_output grad_activation
    grad_weights master_weights optimizer_state weight_update dgrad_gemm wgrad_gemm)
set(kOwned_cost memory rates derive bandwidth_gb_s bandwidth_source capacity_gb capacity_source unit_name
    units_source clock_mhz clock_source tflops macs_per_clock_per_unit macs_source budget_class budget_format
    dim n_layers n_heads n_kv_heads hidden_dim vocab_size tied_embeddings mlp experts top_k devices_per_node
    max_devices scale_up scale_out kernel tile_m tile_n latency_us torus_dims)
set(kLayers format block datapath engine cost)

# file:key of every toml++ edit by field name, each in the layer owning the document it edits.
set(kAllowedEdits
    "engine/plan.cpp:name"            # named_plan_toml: a plan's name (engine owns plans)
    "experiment/experiment.cpp:label" # an experiment's [[plan]] keys (experiment owns experiments)
    "experiment/experiment.cpp:plan")
# file:key of TOML text that names a record field outside its layer: cost/parallel.cpp's warning
# text "zero = 3 shards ..." names the ZeRO stage, not a format's zero field.
set(kAllowedText cost/parallel.cpp:zero)

file(GLOB_RECURSE files RELATIVE "${SRC}" "${SRC}/*.cpp" "${SRC}/*.hpp" "${SRC}/*.h")
set(problems "")
set(checked 0)
foreach(f IN LISTS files)
  string(REGEX MATCH "^[^/]+" layer "${f}")
  file(READ "${SRC}/${f}" text)
  math(EXPR checked "${checked} + 1")
  # Rule 1.
  string(REGEX MATCHALL "(insert_or_assign|emplace|insert|erase)[ ]*\\([ ]*\"[A-Za-z0-9_.]+\"" edits "${text}")
  foreach(e IN LISTS edits)
    string(REGEX REPLACE ".*\"([A-Za-z0-9_.]+)\"$" "\\1" key "${e}")
    if(NOT "${f}:${key}" IN_LIST kAllowedEdits)
      string(APPEND problems "  ${f}: edits TOML field '${key}' by name (${e}); use the record's named change function\n")
    endif()
  endforeach()
  # Rule 2: `key = ` and `[header]` at the start of a literal or after \n.
  string(REGEX MATCHALL "(\"|\\\\n)([a-z_]+) = " assigns "${text}")
  string(REGEX MATCHALL "(\"|\\\\n)\\[\\[?[a-z_.]+\\]" headers "${text}")
  set(keys "")
  foreach(a IN LISTS assigns)
    string(REGEX REPLACE "^(\"|\\\\n)([a-z_]+) = $" "\\2" k "${a}")
    list(APPEND keys "${k}")
  endforeach()
  foreach(h IN LISTS headers)
    string(REGEX REPLACE "^(\"|\\\\n)\\[\\[?([a-z_.]+)\\]$" "\\2" hk "${h}")
    string(REPLACE "." ";" parts "${hk}")
    list(APPEND keys ${parts})
  endforeach()
  list(REMOVE_DUPLICATES keys)
  foreach(k IN LISTS keys)
    set(owners "")
    foreach(l IN LISTS kLayers)
      if(k IN_LIST kOwned_${l})
        list(APPEND owners ${l})
      endif()
    endforeach()
    if(owners AND NOT layer IN_LIST owners AND NOT "${f}:${k}" IN_LIST kAllowedText)
      string(REPLACE ";" ", " owners_text "${owners}")
      string(APPEND problems "  ${f}: writes TOML field '${k}' of a ${owners_text} record; only its layer (src/${owners_text}) writes it: call its to_toml\n")
    endif()
  endforeach()
endforeach()
if(checked LESS 50)
  message(FATAL_ERROR "toml_edits_check: only ${checked} files under ${SRC}")
endif()
if(problems)
  message(FATAL_ERROR "TOML fields written outside their record's layer (docs/records.md):\n${problems}")
endif()
message(STATUS "toml_edits_check: ${checked} files, no TOML field written outside its record's layer")
