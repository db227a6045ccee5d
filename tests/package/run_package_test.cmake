# Script mode (ctest `package`): installs the build tree BUILD into a fresh prefix under WORK,
# configures, builds and runs tests/package against it, then runs the installed `lpemu` and
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
step("configure the consumer" ${CMAKE_COMMAND} -S "${SOURCE}/tests/package" -B "${WORK}/build"
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
