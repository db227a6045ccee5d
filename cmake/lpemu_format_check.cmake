# Script mode (ctest tidy/format): checks that every C++ file git tracks under SOURCE_DIR (except
# test inputs under tests/regression and tests/fuzz/findings) is laid out as .clang-format says.
# Prints "not found: tidy/format skipped" (ctest: skipped) without clang-format-14, git or a checkout.
if(NOT CLANG_FORMAT OR NOT EXISTS "${CLANG_FORMAT}" OR NOT GIT OR NOT EXISTS "${SOURCE_DIR}/.git")
  message("clang-format-14, git or a git checkout not found: tidy/format skipped")
  return()
endif()
execute_process(COMMAND "${GIT}" ls-files "*.cpp" "*.hpp" "*.h" WORKING_DIRECTORY "${SOURCE_DIR}"
                OUTPUT_VARIABLE _files RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message("git ls-files failed, not found: tidy/format skipped")
  return()
endif()
string(STRIP "${_files}" _files)
string(REPLACE "\n" ";" _files "${_files}")
list(FILTER _files EXCLUDE REGEX "^tests/(regression|fuzz/findings)/")
list(LENGTH _files _n)
execute_process(COMMAND "${CLANG_FORMAT}" --dry-run -Werror ${_files} WORKING_DIRECTORY "${SOURCE_DIR}"
                RESULT_VARIABLE _rc ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message("${_err}")
  message(FATAL_ERROR "clang-format: files differ from .clang-format (fix: clang-format-14 -i FILE)")
endif()
message("clang-format: ${_n} files as .clang-format lays them out")
