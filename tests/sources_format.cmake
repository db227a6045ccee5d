# Format-layer tests. The independent reference lives in the shared test-support library.
target_sources(lpemu_test_support PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/support/reference/element_reference.cpp
  ${CMAKE_CURRENT_LIST_DIR}/support/reference/conformance.cpp)
target_link_libraries(lpemu_test_support PUBLIC TBB::tbb)

target_sources(lpemu_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unit/format/format_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/format/to_toml_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/format/errors_test.cpp)

target_sources(lpemu_exhaustive_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/exhaustive/format/codes_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/exhaustive/format/window_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/exhaustive/format/simd_targets_test.cpp)
target_link_libraries(lpemu_exhaustive_tests PRIVATE hwy::hwy)
# The same Highway target set as src/format/codec_simd.cpp (SupportedAndGeneratedTargets() lists
# the targets compiled in by the including file's settings).
target_compile_definitions(lpemu_exhaustive_tests PRIVATE HWY_COMPILE_ALL_ATTAINABLE HWY_WANT_AVX3_DL)

target_sources(lpemu_property_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/property/format/quantize_property_test.cpp)

target_sources(lpemu_golden_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/golden/format/vectors_test.cpp)
target_link_libraries(lpemu_golden_tests PRIVATE lpemu_toml)
