# Checks weft's floors: every `#include "weft/<floor>/..."` in include/weft/<floor'>/ names a
# floor at or below floor', in the order docs/architecture.md declares on its line
#   floors, bottom to top: core gpu sched ...
# A folder of include/weft/ missing from that line fails too, so a new floor is placed
# before it is used. weft/weft.hpp, the umbrella header, stands above every floor.
#
#   cmake -DINCLUDE_DIR=<dir holding weft/> -DARCHITECTURE=<architecture.md> -P layer_order.cmake
cmake_minimum_required(VERSION 3.25)
foreach(required INCLUDE_DIR ARCHITECTURE)
    if(NOT DEFINED ${required})
        message(FATAL_ERROR "layer_order.cmake: -D${required}=... is missing")
    endif()
endforeach()

get_filename_component(INCLUDE_DIR "${INCLUDE_DIR}" ABSOLUTE)
file(STRINGS "${ARCHITECTURE}" order_lines REGEX "^floors, bottom to top:")
list(LENGTH order_lines order_line_count)
if(NOT order_line_count EQUAL 1)
    message(FATAL_ERROR "${ARCHITECTURE}: expected one line 'floors, bottom to top: core ...', found ${order_line_count}")
endif()
string(REGEX REPLACE "^floors, bottom to top:[ ]*" "" floors "${order_lines}")
string(REGEX REPLACE "[ ]+" ";" floors "${floors}")

file(GLOB folders LIST_DIRECTORIES true RELATIVE "${INCLUDE_DIR}/weft" "${INCLUDE_DIR}/weft/*")
set(problems "")
foreach(folder IN LISTS folders)
    if(IS_DIRECTORY "${INCLUDE_DIR}/weft/${folder}" AND NOT folder IN_LIST floors)
        string(APPEND problems "\n  include/weft/${folder}/ is not on the floors line of ${ARCHITECTURE}")
    endif()
endforeach()

file(GLOB_RECURSE sources RELATIVE "${INCLUDE_DIR}/weft" "${INCLUDE_DIR}/weft/*.hpp" "${INCLUDE_DIR}/weft/*.cuh"
     "${INCLUDE_DIR}/weft/*.cu")
list(FILTER sources INCLUDE REGEX "/")  # the umbrella header at the top stands above every floor
set(checked 0)
foreach(source IN LISTS sources)
    string(REGEX REPLACE "/.*" "" from "${source}")
    list(FIND floors "${from}" from_level)
    if(from_level EQUAL -1)
        continue()  # reported above, once per folder
    endif()
    file(STRINGS "${INCLUDE_DIR}/weft/${source}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"weft/[a-z_0-9]+/")
    foreach(line IN LISTS includes)
        string(REGEX REPLACE ".*\"weft/([a-z_0-9]+)/.*" "\\1" to "${line}")
        list(FIND floors "${to}" to_level)
        math(EXPR checked "${checked} + 1")
        if(to_level EQUAL -1)
            string(APPEND problems "\n  weft/${source} includes weft/${to}/, which is on no floor")
        elseif(to_level GREATER from_level)
            string(APPEND problems "\n  weft/${source} (floor ${from}) includes weft/${to}/, a higher floor")
        endif()
    endforeach()
endforeach()

if(problems)
    message(FATAL_ERROR "weft's floors are broken (order: ${floors}):${problems}")
endif()
list(LENGTH sources source_count)
message(STATUS "weft's floors hold: ${checked} includes in ${source_count} files, order: ${floors}")
