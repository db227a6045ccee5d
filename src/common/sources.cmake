target_sources(lpemu PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/named_registry.cpp)
