target_sources(lpemu_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/hdf5_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/svg_plot_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/safetensors_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/output_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/toml_reader_test.cpp)
# toml_reader_test reads src/io/toml_util.hpp, toml++ as lpemu builds it.
target_link_libraries(lpemu_unit_tests PRIVATE lpemu_toml)
