# The core layer: compute-core records (data/cores/*.toml, embedded) and their cycle model.
target_sources(lpemu_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/core.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model.cpp)
