# What the package scripts share: run one step of a user's build (configure, install, ...) and
# stop the script with the step's name and its output when it fails. The output is left in
# `output` for the checks that follow.
#
#   include(${CMAKE_CURRENT_LIST_DIR}/run_or_fail.cmake)
#   run_or_fail("header-only install" "${CMAKE_COMMAND}" --install "${BINARY_DIR}" --prefix "${PREFIX}")
function(run_or_fail what)
    execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE step_output ERROR_VARIABLE step_output RESULT_VARIABLE status)
    if(NOT status EQUAL 0)
        message(FATAL_ERROR "${what} failed:\n${step_output}")
    endif()
    set(output "${step_output}" PARENT_SCOPE)
endfunction()
