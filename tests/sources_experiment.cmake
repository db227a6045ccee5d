target_sources(lpemu_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unit/experiment/proposal_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/experiment/sha256_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/experiment/sweep_test.cpp
)
