target_sources(lpemu_format PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/format.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rounding.cpp
  ${CMAKE_CURRENT_LIST_DIR}/codec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/codec_bulk.cpp
  ${CMAKE_CURRENT_LIST_DIR}/codec_simd.cpp
  ${CMAKE_CURRENT_LIST_DIR}/registry.cpp)
