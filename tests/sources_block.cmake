target_sources(lpemu_test_support PRIVATE ${CMAKE_CURRENT_LIST_DIR}/support/reference/block_reference.cpp)
target_sources(lpemu_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unit/block/block_format_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/block/to_toml_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/block/block_edge_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/block/quantize_cli_test.cpp)
target_sources(lpemu_golden_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/golden/block/mx_golden_test.cpp)
target_link_libraries(lpemu_golden_tests PRIVATE lpemu_toml)
target_sources(lpemu_property_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/property/block/block_property_test.cpp)
add_dependencies(lpemu_unit_tests lpemu_cli)
target_sources(lpemu_exhaustive_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/exhaustive/block/quantize_simd_targets_test.cpp)
