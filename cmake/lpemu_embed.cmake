# Embeds every TOML spec under formats/ into the library.
# lpemu_embed_specs(OUT_VAR DIR) sets OUT_VAR to a generated .cpp that defines
# lpemu::detail::embedded_specs(): a list of {relative path, text}.
function(lpemu_embed_specs out_var spec_dir)
  file(GLOB_RECURSE _specs CONFIGURE_DEPENDS "${spec_dir}/*.toml")
  list(SORT _specs)
  set(_out "${CMAKE_CURRENT_BINARY_DIR}/lpemu_embedded_specs.cpp")
  add_custom_command(
    OUTPUT "${_out}"
    COMMAND ${CMAKE_COMMAND} -DSPEC_DIR=${spec_dir} -DOUT=${_out}
            -P "${PROJECT_SOURCE_DIR}/cmake/lpemu_embed_run.cmake"
    DEPENDS ${_specs} "${PROJECT_SOURCE_DIR}/cmake/lpemu_embed_run.cmake"
    COMMENT "Embedding format specs from ${spec_dir}"
    VERBATIM)
  set(${out_var} "${_out}" PARENT_SCOPE)
endfunction()
