target_sources(lpemu PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/proposal.cpp)
