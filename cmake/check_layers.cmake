# The layers, enforced as an allow-list: each folder may include its own headers and
# those of the folders named for it here, nothing else; a folder that is not listed
# fails the check (a new folder must say where it stands). Run by the build (target
# layer_check, a dependency of every library) as
#   cmake -DROOT=<source dir> -P cmake/check_layers.cmake
# and fails the build naming the file, the line and the rule broken.
#
# In the lists, "x/" is src/x (a private header) or, as "sluice/x/", the public headers
# of x; "sluice" alone is the core's public headers (include/sluice/*.hpp: the
# container, messages, the source factory), which name no source; "sluice/spi/" is
# the source SPI, what a source (in the tree or out of it) is written against.
#
#   cli/     -> the command-line verbs: app/ and everything app/ may include; of AWS,
#               what `sluice autoscale` needs beside the queue (CloudWatch, ECS)
#   app/     -> running pipelines: config/, observe/, ingest/ and everything below them
#               but the sources and the databases: those only through the driver SPI
#               (sluice/driver/: source and sink drivers, the Sink) and the writers
#               (sinks/writer.hpp), never a sink driver's folder (it names no source and no
#               database: tests check that too)
#   config/  -> the option engine: observe/ (the listen address, the admin token's
#               rules), pipeline/, the writers' options, the driver SPI
#   observe/ -> metrics, the HTTP endpoint, admin, one HTTP request: the driver SPI (the
#               sources' figures), the reject reasons (ingest/reject_reasons.hpp)
#   driver/  -> the core's public headers and the driver SPI (sluice/driver/: what a
#               source or sink driver gives the binary, in the tree or out of it; it
#               names no parser's type); driver/ keeps the built-in drivers' verbs
#   sqs/, amqp/, file/ -> sluice/spi/ (the Source seam), runtime/'s helpers, driver/
#               (their drivers), common/; sqs/ also aws/, s3/ and sns/ (its verbs publish
#               to a topic); amqp/ also aws/ (its verbs read the management API over
#               HTTP: only its driver library links it)
#   ingest/  -> the record stage between a source and the writers: driver/ (a message's
#               properties), pipeline/, the sinks' interfaces (sink.hpp, writer.hpp)
#   tracing/ -> the core's public headers (sluice/tracing.hpp), common/: spans and their
#               OTLP exporter, below the core so that the core, the sinks and the
#               publishers can all record spans
#   runtime/ -> the core's public headers and the SPI: the core knows no source
#   sinks/   -> the sinks' core (the Sink interface, the writers) and one folder per
#               database, each a sink driver: pipeline/ (records), runtime/, driver/ (the
#               option rows and value readers), common/
#   pipeline/, common/ -> pure: common/ only (pipeline/ also the record it hands a
#               sink, sluice/driver/record.hpp)
cmake_policy(VERSION 3.20)
set(rules
  "src/common|"
  "src/aws|common/,sluice/aws/"
  "src/s3|aws/,common/,sluice/aws/,sluice/s3/"
  "src/sns|aws/,common/,sluice/aws/,sluice/sns/"
  "src/cloudwatch|aws/,common/,sluice/aws/,sluice/cloudwatch/"
  "src/ecs|aws/,common/,sluice/aws/,sluice/ecs/"
  "src/scale|sluice/scale/"
  "src/tracing|common/,sluice"
  "src/runtime|common/,sluice,sluice/spi/"
  "src/driver|sluice,sluice/spi/,sluice/driver/"
  "src/sqs|sluice/spi/,sluice/driver/,runtime/,driver/,aws/,s3/,common/,sluice,sluice/aws/,sluice/s3/,sluice/sqs/,sluice/sns/"
  "src/amqp|sluice/spi/,sluice/driver/,runtime/,driver/,aws/,common/,sluice,sluice/aws/,sluice/amqp/"
  "src/file|sluice/spi/,sluice/driver/,runtime/,driver/,common/,sluice,sluice/file/"
  "src/pipeline|common/,sluice/driver/record.hpp"
  "src/sinks|pipeline/,runtime/,common/,driver/,sluice,sluice/spi/,sluice/driver/"
  "src/ingest|driver/,sluice/driver/,pipeline/,sinks/writer.hpp,common/,sluice,sluice/spi/"
  "src/observe|common/,ingest/reject_reasons.hpp,sluice,sluice/driver/,sluice/scale/"
  "src/config|observe/,pipeline/,sinks/writer.hpp,common/,sluice,sluice/driver/,sluice/scale/"
  "src/app|config/,observe/,ingest/,driver/,sluice/driver/,sluice/spi/,pipeline/,sinks/writer.hpp,sinks/positions.hpp,runtime/,common/,sluice,sluice/scale/"
  "src/cli|app/,config/,observe/,ingest/,driver/,sluice/driver/,sluice/spi/,pipeline/,sinks/writer.hpp,runtime/,common/,sluice,sluice/aws/,sluice/scale/,sluice/cloudwatch/,sluice/ecs/"
  "include/sluice|sluice"
  "include/sluice/spi|sluice"
  "include/sluice/driver|sluice,sluice/spi/"
  "include/sluice/aws|sluice/aws/"
  "include/sluice/s3|sluice/aws/,sluice/s3/"
  "include/sluice/sns|sluice/aws/,sluice/sns/"
  "include/sluice/cloudwatch|sluice/aws/,sluice/cloudwatch/"
  "include/sluice/ecs|sluice/aws/,sluice/ecs/"
  "include/sluice/scale|sluice/scale/"
  "include/sluice/sqs|sluice,sluice/aws/,sluice/s3/,sluice/sqs/"
  "include/sluice/amqp|sluice,sluice/amqp/"
  "include/sluice/file|sluice,sluice/file/"
)

set(violations "")
set(listed "")
foreach(rule IN LISTS rules)
  string(REPLACE "|" ";" parts "${rule}")
  list(GET parts 0 folder)
  list(LENGTH parts n)
  set(allowed "")
  if(n GREATER 1)
    list(GET parts 1 allowed)
    string(REPLACE "," ";" allowed "${allowed}")
  endif()
  list(APPEND listed "${folder}")
  # Its own headers: src/x includes "x/...".
  get_filename_component(own "${folder}" NAME)
  if(folder MATCHES "^include/sluice/")
    list(APPEND allowed "sluice/${own}/")
  elseif(folder MATCHES "^src/")
    list(APPEND allowed "${own}/")
  endif()
  if(folder STREQUAL "include/sluice")
    file(GLOB files "${ROOT}/${folder}/*.hpp")
  else()
    file(GLOB_RECURSE files "${ROOT}/${folder}/*.hpp" "${ROOT}/${folder}/*.cpp")
  endif()
  foreach(file IN LISTS files)
    file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" header "${line}")
      set(ok FALSE)
      foreach(prefix IN LISTS allowed)
        if(prefix STREQUAL "sluice")
          # The core's public headers: sluice/NAME.hpp, no subfolder.
          if(header MATCHES "^sluice/[^/]+$")
            set(ok TRUE)
          endif()
        else()
          string(FIND "${header}" "${prefix}" at)
          if(at EQUAL 0)
            set(ok TRUE)
          endif()
        endif()
      endforeach()
      if(NOT ok)
        if(header MATCHES "^(sluice/[^/]+/)")
          set(head "${CMAKE_MATCH_1}")
        elseif(header MATCHES "^([^/]+/)")
          set(head "${CMAKE_MATCH_1}")
        else()
          set(head "${header}")
        endif()
        file(RELATIVE_PATH shown "${ROOT}" "${file}")
        string(APPEND violations "  ${shown}: #include \"${header}\" (${folder} may not include ${head})\n")
      endif()
    endforeach()
  endforeach()
endforeach()

# Every folder must be in the list.
file(GLOB folders LIST_DIRECTORIES true "${ROOT}/src/*" "${ROOT}/include/sluice/*")
foreach(path IN LISTS folders)
  if(IS_DIRECTORY "${path}")
    file(RELATIVE_PATH folder "${ROOT}" "${path}")
    if(NOT folder IN_LIST listed)
      string(APPEND violations "  ${folder}: a folder the layer rules do not list (say where it stands in cmake/check_layers.cmake)\n")
    endif()
  endif()
endforeach()

if(violations)
  message(FATAL_ERROR "layer check failed: a layer includes one above it or beside it\n${violations}")
endif()
