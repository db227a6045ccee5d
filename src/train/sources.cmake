target_sources(lpemu_train PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/attention_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/backward.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linear_plan.cpp)
target_sources(lpemu_train PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/optimizer.cpp)
target_sources(lpemu_train PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/loss_scale.cpp)
