# The one spec embedder: text files of the source tree compiled into a layer's library, so the
# built-in records work from any directory.
#
#   lpemu_embed(TARGET DIR dir GLOBS pattern... [RECURSE] HEADER header NAMESPACE ns
#               FUNCTION fn TYPE type)
#
# adds to TARGET a generated .cpp defining `std::span<const ns::type> ns::fn()`: every file under
# DIR matching a GLOBS pattern (relative to DIR; RECURSE: in subfolders too), sorted by path, as
# {path relative to DIR, text}. HEADER (included by the generated file) declares `type` (two
# members: const char* path, text) and `fn`. The generated file changes, and recompiles, only
# when an embedded file is added, removed or edited. The work is done by
# cmake/lpemu_embed_run.cmake (script mode).
function(lpemu_embed target)
  cmake_parse_arguments(E "RECURSE" "DIR;HEADER;NAMESPACE;FUNCTION;TYPE" "GLOBS" ${ARGN})
  set(_glob GLOB)
  if(E_RECURSE)
    set(_glob GLOB_RECURSE)
  endif()
  set(_abs "")
  foreach(g IN LISTS E_GLOBS)
    list(APPEND _abs "${E_DIR}/${g}")
  endforeach()
  file(${_glob} _files CONFIGURE_DEPENDS ${_abs})
  list(SORT _files)
  set(_out "${CMAKE_CURRENT_BINARY_DIR}/${target}_embedded.cpp")
  string(REPLACE ";" "|" _globs "${E_GLOBS}")
  add_custom_command(
    OUTPUT "${_out}"
    COMMAND ${CMAKE_COMMAND} "-DDIR=${E_DIR}" "-DGLOBS=${_globs}" "-DRECURSE=${E_RECURSE}" "-DOUT=${_out}"
            "-DHEADER=${E_HEADER}" "-DNAMESPACE=${E_NAMESPACE}" "-DFUNCTION=${E_FUNCTION}" "-DTYPE=${E_TYPE}"
            -P "${PROJECT_SOURCE_DIR}/cmake/lpemu_embed_run.cmake"
    DEPENDS ${_files} "${PROJECT_SOURCE_DIR}/cmake/lpemu_embed_run.cmake"
    COMMENT "Embedding ${E_GLOBS} from ${E_DIR} into ${target}"
    VERBATIM)
  target_sources(${target} PRIVATE "${_out}")
endfunction()
