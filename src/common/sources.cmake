target_sources(lpemu_common PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/named_registry.cpp
  ${CMAKE_CURRENT_LIST_DIR}/names.cpp)
