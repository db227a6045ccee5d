target_sources(lpemu_cli PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/main.cpp
  ${CMAKE_CURRENT_LIST_DIR}/common.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_formats.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_convert.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_quantize.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_proposal.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_cost.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_cost_cluster.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_dot.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_gemm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_core.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_sweep.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_import.cpp
)
# Shipped models and plans are also looked up in the source tree the executable was built from.
target_compile_definitions(lpemu_cli PRIVATE LPEMU_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
