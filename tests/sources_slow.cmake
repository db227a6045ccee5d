# Full sweeps, registered only with -DLPEMU_SLOW_TESTS=ON (label slow).
target_sources(lpemu_slow_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/slow/format/full_sweep_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/slow/cost/search_pick_test.cpp)
