target_sources(lpemu PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/block_format.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantize.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pack.cpp)
