# Script mode (ctest tidy/library/LAYER): runs CLANG_TIDY with the checked-in .clang-tidy on each
# .cpp file of library layer LAYER (the folder of that name under src) listed in BUILD_DIR/compile_commands.json.
# Prints "clang-tidy not found" (ctest: skipped) when it is missing.
if(NOT CLANG_TIDY OR NOT EXISTS "${CLANG_TIDY}")
  message("clang-tidy not found: tidy/library skipped")
  return()
endif()
if(NOT EXISTS "${BUILD_DIR}/compile_commands.json")
  message(FATAL_ERROR "${BUILD_DIR}/compile_commands.json: missing; configure with CMAKE_EXPORT_COMPILE_COMMANDS=ON")
endif()
if(NOT LAYER OR NOT IS_DIRECTORY "${SOURCE_DIR}/src/${LAYER}")
  message(FATAL_ERROR "LAYER='${LAYER}': expected a library layer, a folder of ${SOURCE_DIR}/src")
endif()
file(GLOB _sources "${SOURCE_DIR}/src/${LAYER}/*.cpp")
list(SORT _sources)
set(_failed "")
list(LENGTH _sources _n)
foreach(_f IN LISTS _sources)
  # The compile commands are g++'s: clang is told to ignore the warning options it lacks and to
  # leave warnings to the compiler build (-Werror there).
  execute_process(COMMAND "${CLANG_TIDY}" --quiet -p "${BUILD_DIR}" "--config-file=${SOURCE_DIR}/.clang-tidy"
                          --extra-arg=-Wno-unknown-warning-option --extra-arg=-Wno-error "${_f}"
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message("${_out}${_err}")
    list(APPEND _failed "${_f}")
  endif()
endforeach()
if(_failed)
  list(JOIN _failed "\n  " _list)
  message(FATAL_ERROR "clang-tidy found problems in:\n  ${_list}")
endif()
message("clang-tidy: ${_n} sources of layer ${LAYER} clean")
