target_sources(lpemu_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/unit/core/core_model_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/core/core_app_test.cpp)
target_sources(lpemu_property_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/property/core/core_property_test.cpp)
