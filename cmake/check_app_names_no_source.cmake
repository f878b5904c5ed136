# src/app composes the pipeline from the registered source drivers and names no source:
# no source's headers, namespaces, types or source.type values in its code. Run as a
# test (tests/CMakeLists.txt):
#   cmake -DROOT=<source dir> -P cmake/check_app_names_no_source.cmake
#
# Not yet covered: the per-source command-line verbs (publish, queue create/stats,
# autoscale's queue readers, the round-trip demo) still live in src/app and name their
# services; they are listed here so that no other file can join them unnoticed.
cmake_policy(VERSION 3.20)
set(cli_verbs amqp_commands.cpp amqp_commands.hpp aws_commands.cpp aws_commands.hpp
    autoscale.cpp autoscale.hpp demo.cpp demo.hpp main.cpp publish.cpp publish.hpp)
set(pattern "(sqs::|amqp::|file::|Sqs[A-Z]|Amqp[A-Z]|RabbitMq|SourceType|\"sqs\"|\"rabbitmq\"|\"file\"|#[ \t]*include[ \t]*\"(sluice/)?(sqs|amqp|file|s3)/)")
file(GLOB files "${ROOT}/src/app/*.cpp" "${ROOT}/src/app/*.hpp")
set(found "")
foreach(file IN LISTS files)
  get_filename_component(name "${file}" NAME)
  if(name IN_LIST cli_verbs)
    continue()
  endif()
  file(STRINGS "${file}" lines)
  set(number 0)
  foreach(line IN LISTS lines)
    math(EXPR number "${number} + 1")
    string(REGEX REPLACE "//.*$" "" code "${line}")  # comments may say what they like
    if(code MATCHES "${pattern}")
      string(APPEND found "  src/app/${name}:${number}: ${line}\n")
    endif()
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "src/app names a source (go through the driver registry instead):\n${found}")
endif()
message(STATUS "src/app names no source outside its command-line verbs")
