# src/io serves two layers: TOML reading (toml_parse.cpp with the private toml.hpp and
# toml_util.hpp; record_files.cpp, named records of one kind) and bounded reads and output files (output.cpp) sit in lpemu_common, under every
# layer; the file formats (HDF5, .npy, safetensors, SVG) and SHA-256 are lpemu_io, the one layer
# with HDF5 (src/CMakeLists.txt).
target_sources(lpemu_common PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/output.cpp
  ${CMAKE_CURRENT_LIST_DIR}/record_files.cpp
  ${CMAKE_CURRENT_LIST_DIR}/toml_parse.cpp)
target_sources(lpemu_io PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/npy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hdf5.cpp
  ${CMAKE_CURRENT_LIST_DIR}/h5_check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sha256.cpp
  ${CMAKE_CURRENT_LIST_DIR}/svg_plot.cpp
)
target_sources(lpemu_io PRIVATE ${CMAKE_CURRENT_LIST_DIR}/safetensors.cpp)
