target_sources(lpemu_block PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/block_format.cpp
  ${CMAKE_CURRENT_LIST_DIR}/layout.cpp
  ${CMAKE_CURRENT_LIST_DIR}/scale_rules.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantize.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantize_generic.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantize_fast.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pack.cpp)
target_sources(lpemu_block PRIVATE ${CMAKE_CURRENT_LIST_DIR}/quantize_simd.cpp)
