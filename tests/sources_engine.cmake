target_sources(lpemu_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/plan_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/gemm_empty_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/tokenizer_metrics_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/forward_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/cli_engine_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/block_plan_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/engine/datapath_plan_test.cpp)
target_sources(lpemu_golden_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/golden/engine/stories260k_test.cpp)
add_dependencies(lpemu_unit_tests lpemu_cli)
target_sources(lpemu_property_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/property/engine/forward_property_test.cpp)
