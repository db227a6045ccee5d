target_sources(lpemu_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unit/train/attention_plan_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/train/backward_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/train/datapath_train_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/train/linear_plan_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/train/mx_gradient_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/train/hadamard_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/train/scaling_test.cpp)
target_sources(lpemu_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/unit/train/optimizer_test.cpp)
target_sources(lpemu_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/unit/train/loss_scale_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/train/range_counts_test.cpp)
