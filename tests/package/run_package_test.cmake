# Script mode (ctest `package`): installs the build tree BUILD into a fresh prefix under WORK,
# configures, builds and runs tests/package against it (the whole library, and lpemu::format alone
# with no HDF5 or PCRE2 on its link line), then runs the installed `lpemu` and
# imports the installed Python module from PREFIX/PYTHON_DIR (when PYTHON names an interpreter).
# Fails with the step's output on any error.
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test: ${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK}")
set(prefix "${WORK}/prefix")
step("install" ${CMAKE_COMMAND} --install "${BUILD}" --prefix "${prefix}")
step("configure the consumer" ${CMAKE_COMMAND} -G "Unix Makefiles" -S "${SOURCE}/tests/package" -B "${WORK}/build"
     -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}")
step("build the consumer" ${CMAKE_COMMAND} --build "${WORK}/build")
file(WRITE "${WORK}/tiny.toml" "name = \"tiny\"
[source]
model = \"stories260K\"
text = \"${prefix}/share/lpemu/data/models/stories260K/paragraph.txt\"
max_tokens = 32
[output]
dir = \"${WORK}/out\"
[[plan]]
label = \"fp32\"
plan = \"fp32\"
[[plan]]
label = \"mxfp4\"
plan = \"mxfp4\"
")
step("run the consumer" "${WORK}/build/sweep_example" "${WORK}/tiny.toml" "${prefix}/share/lpemu")
message(STATUS "${step_out}")
if(NOT step_out MATCHES "fp32 +mean NLL [0-9.]+  KL 0 " OR NOT step_out MATCHES "mxfp4 +mean NLL")
  message(FATAL_ERROR "package test: unexpected consumer output:\n${step_out}")
endif()
# The one-layer consumer: runs, and neither its link command nor the program names HDF5 or PCRE2.
step("run the format-only consumer" "${WORK}/build/format_example")
if(NOT step_out MATCHES "fp8_e4m3\\(1\\) = 0x38 = 1")
  message(FATAL_ERROR "package test: unexpected format_example output:\n${step_out}")
endif()
file(GLOB_RECURSE _link_txt "${WORK}/build/CMakeFiles/format_example.dir/link.txt")
if(NOT _link_txt)
  message(FATAL_ERROR "package test: no link command of format_example under ${WORK}/build")
endif()
file(READ "${_link_txt}" _link)
if(_link MATCHES "hdf5|pcre2")
  message(FATAL_ERROR "package test: format_example (lpemu::format only) links HDF5 or PCRE2:\n${_link}")
endif()
find_program(_ldd ldd)
if(_ldd)
  step("ldd format_example" "${_ldd}" "${WORK}/build/format_example")
  if(step_out MATCHES "hdf5|pcre2")
    message(FATAL_ERROR "package test: format_example loads HDF5 or PCRE2:\n${step_out}")
  endif()
endif()
message(STATUS "format_example links without HDF5 and PCRE2")
step("run the installed lpemu" "${prefix}/bin/lpemu" eval --model stories260K --plan nvfp4
     --text "${prefix}/share/lpemu/data/models/stories260K/paragraph.txt")
if(NOT step_out MATCHES "plan nvfp4")
  message(FATAL_ERROR "package test: installed lpemu eval printed:\n${step_out}")
endif()
if(PYTHON)
  set(site "${prefix}/${PYTHON_DIR}")
  step("import the installed Python module" ${CMAKE_COMMAND} -E env "PYTHONPATH=${site}" "${PYTHON}" -c
       "import lpemu\nassert lpemu.load_plan('nvfp4').name == 'nvfp4'\nprint(lpemu.__file__)")
  if(NOT step_out MATCHES "^${prefix}")
    message(FATAL_ERROR "package test: imported lpemu from ${step_out}, not from ${prefix}")
  endif()
endif()
