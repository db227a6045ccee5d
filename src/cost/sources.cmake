# The cost layer. Its built-in data (data/{hardware,shapes,systems}/*.toml) is embedded into the
# library (src/CMakeLists.txt, cmake/lpemu_embed.cmake), so `lpemu cost` works from any directory.
target_sources(lpemu_cost PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cost_format.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mac_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/target.cpp
  ${CMAKE_CURRENT_LIST_DIR}/workload.cpp
  ${CMAKE_CURRENT_LIST_DIR}/catalog.cpp
  ${CMAKE_CURRENT_LIST_DIR}/system.cpp
  ${CMAKE_CURRENT_LIST_DIR}/collectives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kernel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/parallel.cpp)
