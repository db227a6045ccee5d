target_sources(lpemu_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unit/datapath/datapath_test.cpp)
target_sources(lpemu_golden_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/golden/datapath/tensor_cores_test.cpp)
target_sources(lpemu_property_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/property/datapath/datapath_property_test.cpp)
target_link_libraries(lpemu_golden_tests PRIVATE tomlplusplus::tomlplusplus)
