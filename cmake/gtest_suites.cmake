# Run after a GoogleTest executable is built: writes OUTPUT, which registers one CTest
# test per suite of EXECUTABLE, named PREFIX.Suite (--gtest_filter=Suite.*). One process
# per suite rather than per test: under the sanitizers a process of the test binary takes
# a second to start and end, and there are a few hundred tests.
execute_process(COMMAND "${EXECUTABLE}" --gtest_list_tests
  OUTPUT_VARIABLE listing RESULT_VARIABLE result TIMEOUT 120)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --gtest_list_tests: exit ${result}\n${listing}")
endif()
# A list of lines: a ';' a parameter prints must not split one.
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(content "")
foreach(line IN LISTS lines)
  # "Suite." or "Prefix/Suite.  # TypeParam = ..."; test names are indented.
  if(line MATCHES "^([^ ]+)\\.( |$)")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND content
      "add_test([=[${PREFIX}.${suite}]=] [==[${EXECUTABLE}]==] [==[--gtest_filter=${suite}.*]==])\n"
      "set_tests_properties([=[${PREFIX}.${suite}]=] PROPERTIES WORKING_DIRECTORY [==[${WORKING_DIRECTORY}]==])\n")
  endif()
endforeach()
if(content STREQUAL "")
  message(FATAL_ERROR "${EXECUTABLE} listed no test suite")
endif()
file(WRITE "${OUTPUT}" "${content}")
