# The application (src/app, src/cli, src/config, src/observe) composes the pipeline
# from the registered source and sink drivers and names no source and no database: no
# source's or sink driver's headers, namespaces, types, source.type or sink.type values
# in its code (the link-level check is layers.AppLinksWithoutAnyDriver). Run as a test
# (tests/CMakeLists.txt):
#   cmake -DROOT=<source dir> -P cmake/check_app_names_no_source.cmake
#
# The per-source command-line verbs are the drivers' too (driver/verbs.hpp): no file of
# the application is excepted.
cmake_policy(VERSION 3.20)
set(pattern "(sqs::|amqp::|file::|Sqs[A-Z]|Amqp[A-Z]|RabbitMq|SourceType|\"sqs\"|\"rabbitmq\"|\"file\"|#[ \t]*include[ \t]*\"(sluice/)?(sqs|amqp|file|s3)/|(Sqlite|Postgres|Mongo)(Options|Settings|Sink|Driver)|make_(sqlite|postgres|mongo)_sink|SinkType|\"sqlite\"|\"postgres\"|\"postgresql\"|\"mongodb\"|#[ \t]*include[ \t]*\"sinks/(sqlite|postgres|mongodb)/)")
set(files "")
foreach(room app cli config observe)
  file(GLOB room_files "${ROOT}/src/${room}/*.cpp" "${ROOT}/src/${room}/*.hpp")
  list(APPEND files ${room_files})
endforeach()
set(found "")
foreach(file IN LISTS files)
  get_filename_component(name "${file}" NAME)
  file(STRINGS "${file}" lines)
  set(number 0)
  foreach(line IN LISTS lines)
    math(EXPR number "${number} + 1")
    string(REGEX REPLACE "//.*$" "" code "${line}")  # comments may say what they like
    if(code MATCHES "${pattern}")
      file(RELATIVE_PATH shown "${ROOT}" "${file}")
      string(APPEND found "  ${shown}:${number}: ${line}\n")
    endif()
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "the application names a source or a sink (go through the driver registries instead):\n${found}")
endif()
message(STATUS "the application names no source and no sink")
