# The version and commit that every Report carries as provenance. Read once at configure
# time from git; "unknown" outside a git checkout. No network access.
include_guard(GLOBAL)

set(MESHWORK_GIT_COMMIT "unknown")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS ${CMAKE_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
    OUTPUT_VARIABLE _commit OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _rc ERROR_QUIET)
  if(_rc EQUAL 0 AND _commit)
    set(MESHWORK_GIT_COMMIT ${_commit})
  endif()
endif()
set(MESHWORK_VERSION_STRING "${PROJECT_VERSION}")
