target_sources(lpemu_experiment PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/proposal.cpp
  ${CMAKE_CURRENT_LIST_DIR}/proposal_block.cpp
  ${CMAKE_CURRENT_LIST_DIR}/proposal_dot.cpp
  ${CMAKE_CURRENT_LIST_DIR}/proposal_summary.cpp
  ${CMAKE_CURRENT_LIST_DIR}/proposal_request.cpp
  ${CMAKE_CURRENT_LIST_DIR}/experiment.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sweep.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pricing.cpp
  ${CMAKE_CURRENT_LIST_DIR}/study.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report_figures.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report_html.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report_md.cpp
  ${CMAKE_CURRENT_LIST_DIR}/context.cpp
  ${CMAKE_CURRENT_LIST_DIR}/datapath_error.cpp
  ${CMAKE_CURRENT_LIST_DIR}/evaluation.cpp
)
