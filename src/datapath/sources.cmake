target_sources(lpemu_datapath PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/datapath.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dot.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dot_cases.cpp
  ${CMAKE_CURRENT_LIST_DIR}/exact.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fast.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fast_element.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fast_rows.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm.cpp)
