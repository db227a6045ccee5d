target_sources(lpemu_cli PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/main.cpp
  ${CMAKE_CURRENT_LIST_DIR}/common.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_formats.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_convert.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_quantize.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_proposal.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_cost.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cmd_dot.cpp
)
