target_sources(lpemu_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/hdf5_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/svg_plot_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/safetensors_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/output_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/toml_reader_test.cpp)
# toml_reader_test reads src/io/toml_util.hpp, toml++ as lpemu builds it.
target_link_libraries(lpemu_unit_tests PRIVATE lpemu_toml)

# A record's TOML is read and written only by its own layer (docs/records.md): no TOML field is
# edited or written by name outside the layer that owns the record (label unit).
add_test(NAME unit/records/toml_fields_in_owning_layer
         COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR}/src -P ${CMAKE_CURRENT_LIST_DIR}/unit/io/toml_edits_check.cmake)
set_tests_properties(unit/records/toml_fields_in_owning_layer PROPERTIES LABELS unit)
