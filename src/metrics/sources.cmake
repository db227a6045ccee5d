target_sources(lpemu_metrics PRIVATE ${CMAKE_CURRENT_LIST_DIR}/metrics.cpp)
target_sources(lpemu_metrics PRIVATE ${CMAKE_CURRENT_LIST_DIR}/perplexity.cpp)
