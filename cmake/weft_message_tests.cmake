# Tests that a program refuses bad input: for each "name|arguments|message" case,
# <prefix>_<name> runs `COMMAND... arguments` and must fail (non-zero exit), and
# <prefix>_<name>_message must print `message` (a regular expression). Arguments are
# split as a shell would; avoid an unbalanced "[" in a case (CMake lists group on it).
# ENVIRONMENT takes VAR=VALUE items for both tests (an mpirun command needs WEFT_MPI_TEST_ENV).
#   weft_add_message_tests(example_tool_bad COMMAND tool --flag FIXTURES data CASES ${cases})
function(weft_add_message_tests prefix)
    cmake_parse_arguments(PARSE_ARGV 1 arg "" "FIXTURES" "COMMAND;CASES;ENVIRONMENT")
    foreach(case IN LISTS arg_CASES)
        string(REPLACE "|" ";" parts "${case}")
        list(GET parts 0 name)
        list(GET parts 1 arguments)
        list(GET parts 2 message)
        separate_arguments(arguments UNIX_COMMAND "${arguments}")
        add_test(NAME ${prefix}_${name} COMMAND ${arg_COMMAND} ${arguments})
        set_tests_properties(${prefix}_${name} PROPERTIES WILL_FAIL ON)
        add_test(NAME ${prefix}_${name}_message COMMAND ${arg_COMMAND} ${arguments})
        set_tests_properties(${prefix}_${name}_message PROPERTIES PASS_REGULAR_EXPRESSION "${message}")
        if(arg_FIXTURES)
            set_tests_properties(${prefix}_${name} ${prefix}_${name}_message PROPERTIES
                                 FIXTURES_REQUIRED "${arg_FIXTURES}")
        endif()
        if(arg_ENVIRONMENT)
            set_tests_properties(${prefix}_${name} ${prefix}_${name}_message PROPERTIES
                                 ENVIRONMENT "${arg_ENVIRONMENT}")
        endif()
    endforeach()
endfunction()
