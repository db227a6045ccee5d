target_sources(lpemu_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unit/experiment/proposal_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/experiment/proposal_block_dot_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/experiment/sha256_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/experiment/sweep_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/experiment/figures_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/experiment/context_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/experiment/datapath_error_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/experiment/failure_classes_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit/experiment/quantization_stats_test.cpp
)

# experiments/record_activations.py on a tiny PyTorch model, then `lpemu replay` of its output
# (needs Debian's python3-torch and python3-h5py, which `make test` installs, and the lpemu module);
# `python3 -m lpemu.plot` redraws a small sweep's figures with matplotlib.
if(LPEMU_BUILD_PYTHON)
  add_test(NAME python/record_activations
           COMMAND ${Python_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/python/test_record_activations.py
                   $<TARGET_FILE:lpemu_cli> ${PROJECT_SOURCE_DIR})
  set_tests_properties(python/record_activations PROPERTIES LABELS python
                       ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python")
  add_test(NAME python/plot
           COMMAND ${Python_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/python/test_plot.py
                   $<TARGET_FILE:lpemu_cli> ${PROJECT_SOURCE_DIR})
  set_tests_properties(python/plot PROPERTIES LABELS python ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python")
endif()
