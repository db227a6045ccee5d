target_sources(lpemu_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/hdf5_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/svg_plot_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/safetensors_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/io/output_test.cpp)
