# Python tests (label python): pytest over the lpemu module in the build tree; the documentation's
# examples and file references (label docs); and the package test (label package): a fresh prefix install + find_package consumer.
if(LPEMU_BUILD_PYTHON)
  set(_py_env "PYTHONPATH=${PROJECT_BINARY_DIR}/python" "LPEMU_BINARY=$<TARGET_FILE:lpemu_cli>"
              "LPEMU_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  foreach(t IN ITEMS module engine torch torch_train app train train_scaling corpus train_experiment train_attention)
    add_test(NAME python/${t}
             COMMAND ${Python_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_LIST_DIR}/python/test_${t}.py)
    set_tests_properties(python/${t} PROPERTIES LABELS python ENVIRONMENT "${_py_env}")
  endforeach()
  # Every example of README.md and docs/*.md, and no reference to a file the repo lacks (label docs).
  foreach(t IN ITEMS doc_examples repo_references)
    add_test(NAME docs/${t}
             COMMAND ${Python_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_LIST_DIR}/python/test_${t}.py)
    set_tests_properties(docs/${t} PROPERTIES LABELS docs ENVIRONMENT "${_py_env}" TIMEOUT 600)
  endforeach()
endif()
add_test(NAME package/install_find_package
         COMMAND ${CMAKE_COMMAND} -DBUILD=${PROJECT_BINARY_DIR} -DSOURCE=${PROJECT_SOURCE_DIR}
                 -DWORK=${PROJECT_BINARY_DIR}/package_test
                 "-DPYTHON=$<$<BOOL:${LPEMU_BUILD_PYTHON}>:${Python_EXECUTABLE}>" -DPYTHON_DIR=${LPEMU_PYTHON_INSTALL_DIR}
                 -P ${CMAKE_CURRENT_LIST_DIR}/package/run_package_test.cmake)
set_tests_properties(package/install_find_package PROPERTIES LABELS package)
