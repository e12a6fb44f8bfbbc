# Compiles small programs against ampx.h and checks which compile: the
# experimental tier is visible only with AMPX_EXPERIMENTAL (also when ampx.h
# was included before without it), an ignored status and a deprecated
# function are diagnosed. Every refusal has a control that differs only in
# what is being tested and must compile, so a refusal cannot pass for an
# unrelated reason (a missing include path, a typo).
#
#   cmake -DCC=<c compiler> -DCXX=<c++ compiler> -DINCLUDE=<include dir>
#         -DSOURCES=<this folder> -DWORK=<scratch folder> -P check_tiers.cmake
set(failures 0)
# Compiled to an object, not -fsyntax-only: GCC's C front end reports an
# ignored warn_unused_result only when it generates code.
file(MAKE_DIRECTORY ${WORK})
set(common -c -o ${WORK}/check.o -I${INCLUDE} -Wall -Wextra -pedantic)

function(expect outcome what compiler)
  execute_process(COMMAND ${compiler} ${common} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(outcome STREQUAL "compiles" AND NOT rc EQUAL 0)
    message(SEND_ERROR "expected to compile, but it did not: ${what}\n${err}")
    math(EXPR failures "${failures} + 1")
  elseif(outcome STREQUAL "fails" AND rc EQUAL 0)
    message(SEND_ERROR "expected a compile error, but it compiled: ${what}")
    math(EXPR failures "${failures} + 1")
  else()
    message(STATUS "ok (${outcome}): ${what}")
  endif()
  set(failures ${failures} PARENT_SCOPE)
endfunction()

set(c99 -x c -std=c99 -Werror=implicit-function-declaration)
set(cxx17 -x c++ -std=c++17)

expect(fails "C99, an experimental call without AMPX_EXPERIMENTAL" ${CC}
       ${c99} ${SOURCES}/experimental_call.c)
expect(compiles "C99, the same call with -DAMPX_EXPERIMENTAL" ${CC}
       ${c99} -DAMPX_EXPERIMENTAL -Werror ${SOURCES}/experimental_call.c)
expect(fails "C++17, an experimental call without AMPX_EXPERIMENTAL" ${CXX}
       ${cxx17} ${SOURCES}/experimental_call.c)
expect(compiles "C++17, the same call with -DAMPX_EXPERIMENTAL" ${CXX}
       ${cxx17} -DAMPX_EXPERIMENTAL -Werror ${SOURCES}/experimental_call.c)
expect(compiles "C99, ampx.h included without, then with AMPX_EXPERIMENTAL" ${CC}
       ${c99} -Werror ${SOURCES}/include_twice.c)
expect(compiles "C++17, ampx.h included without, then with AMPX_EXPERIMENTAL" ${CXX}
       ${cxx17} -Werror ${SOURCES}/include_twice.c)

expect(fails "C99, an ignored status under -Werror=unused-result" ${CC}
       ${c99} -Werror=unused-result ${SOURCES}/ignored_status.c)
expect(compiles "C99, the same with AMPX_NODISCARD defined empty (the opt-out)" ${CC}
       ${c99} -Werror=unused-result "-DAMPX_NODISCARD=" ${SOURCES}/ignored_status.c)
expect(fails "C++17, an ignored status under -Werror=unused-result" ${CXX}
       ${cxx17} -Werror=unused-result ${SOURCES}/ignored_status.c)
expect(compiles "C++17, the same with AMPX_NODISCARD defined empty" ${CXX}
       ${cxx17} -Werror=unused-result "-DAMPX_NODISCARD=" ${SOURCES}/ignored_status.c)

expect(fails "C99, a call of the deprecated ampx_checkpoint" ${CC}
       ${c99} -Werror=deprecated-declarations ${SOURCES}/deprecated_call.c)
expect(compiles "C99, its replacement ampx_checkpoint_segment" ${CC}
       ${c99} -Werror -DUSE_REPLACEMENT ${SOURCES}/deprecated_call.c)
expect(fails "C++17, a call of the deprecated ampx_checkpoint" ${CXX}
       ${cxx17} -Werror=deprecated-declarations ${SOURCES}/deprecated_call.c)
expect(compiles "C++17, its replacement ampx_checkpoint_segment" ${CXX}
       ${cxx17} -Werror -DUSE_REPLACEMENT ${SOURCES}/deprecated_call.c)

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} API tier check(s) failed")
endif()
message(STATUS "all API tier checks passed")
