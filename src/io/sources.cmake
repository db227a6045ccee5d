target_sources(lpemu PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/npy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/output.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hdf5.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sha256.cpp
  ${CMAKE_CURRENT_LIST_DIR}/svg_plot.cpp
  ${CMAKE_CURRENT_LIST_DIR}/toml_parse.cpp
)
target_sources(lpemu PRIVATE ${CMAKE_CURRENT_LIST_DIR}/safetensors.cpp)
