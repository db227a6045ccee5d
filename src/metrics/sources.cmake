target_sources(lpemu PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_eval.cpp)
target_sources(lpemu PRIVATE ${CMAKE_CURRENT_LIST_DIR}/perplexity.cpp)
