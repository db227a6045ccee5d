# The cost layer. Its built-in data (data/{hardware,shapes}/*.toml)
# is embedded into the library, so `lpemu cost` works from any directory.
file(GLOB _lpemu_cost_data CONFIGURE_DEPENDS
     "${PROJECT_SOURCE_DIR}/data/hardware/*.toml" "${PROJECT_SOURCE_DIR}/data/shapes/*.toml"
     "${PROJECT_SOURCE_DIR}/data/systems/*.toml")
set(_lpemu_cost_out "${CMAKE_CURRENT_BINARY_DIR}/lpemu_cost_data.cpp")
add_custom_command(
  OUTPUT "${_lpemu_cost_out}"
  COMMAND ${CMAKE_COMMAND} -DDATA_DIR=${PROJECT_SOURCE_DIR}/data -DOUT=${_lpemu_cost_out}
          -P "${CMAKE_CURRENT_LIST_DIR}/embed_data.cmake"
  DEPENDS ${_lpemu_cost_data} "${CMAKE_CURRENT_LIST_DIR}/embed_data.cmake"
  COMMENT "Embedding cost-model data from data/"
  VERBATIM)
target_sources(lpemu PRIVATE
  "${_lpemu_cost_out}"
  ${CMAKE_CURRENT_LIST_DIR}/cost_format.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mac_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/target.cpp
  ${CMAKE_CURRENT_LIST_DIR}/workload.cpp
  ${CMAKE_CURRENT_LIST_DIR}/catalog.cpp
  ${CMAKE_CURRENT_LIST_DIR}/system.cpp
  ${CMAKE_CURRENT_LIST_DIR}/collectives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kernel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/parallel.cpp)
