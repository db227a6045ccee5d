target_sources(lpemu_golden_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/golden/engine/stories260k_test.cpp)
