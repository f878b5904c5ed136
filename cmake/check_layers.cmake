# The layers, enforced: each folder may include only what lies below it.
# Run by the build (target layer_check, a dependency of every library) as
#   cmake -DROOT=<source dir> -P cmake/check_layers.cmake
# and fails the build naming the file, the line and the rule broken.
#
#   app/  ->  pipeline/, sinks/, runtime/, sqs/ (and later amqp/), aws/, common/
#   sinks/ -> pipeline/, runtime/ (messages), common/
#   sqs/  ->  runtime/ (the Source interface it implements), s3/ (large payloads), aws/, common/
#   s3/, sns/, cloudwatch/, ecs/ -> aws/, common/
#   scale/ -> nothing: the autoscale signal is pure
#   runtime/  -> common/ only: the container core knows no source
#   pipeline/ -> common/ only: pure functions
#   aws/  ->  common/
# Public headers of the core (include/sluice/*.hpp) name no source either.

set(rules
  "src/runtime|aws/,sqs/,s3/,sns/,amqp/,pipeline/,sinks/,app/,sluice/aws/,sluice/sqs/,sluice/s3/,sluice/sns/,sluice/amqp/"
  "src/pipeline|aws/,sqs/,s3/,sns/,amqp/,runtime/,sinks/,app/,sluice/"
  "src/common|aws/,sqs/,s3/,sns/,amqp/,runtime/,pipeline/,sinks/,app/,sluice/"
  "src/aws|sqs/,s3/,sns/,amqp/,runtime/,pipeline/,sinks/,app/,sluice/sqs/,sluice/s3/,sluice/sns/,sluice/amqp/"
  "src/s3|sqs/,sns/,amqp/,runtime/,pipeline/,sinks/,app/,sluice/sqs/,sluice/sns/,sluice/amqp/"
  "src/sns|sqs/,s3/,amqp/,runtime/,pipeline/,sinks/,app/,sluice/sqs/,sluice/s3/,sluice/amqp/"
  "src/cloudwatch|sqs/,s3/,sns/,ecs/,amqp/,runtime/,pipeline/,sinks/,app/,scale/,sluice/sqs/,sluice/s3/,sluice/sns/,sluice/ecs/,sluice/amqp/"
  "src/ecs|sqs/,s3/,sns/,cloudwatch/,amqp/,runtime/,pipeline/,sinks/,app/,scale/,sluice/sqs/,sluice/s3/,sluice/sns/,sluice/cloudwatch/,sluice/amqp/"
  "src/scale|aws/,sqs/,s3/,sns/,cloudwatch/,ecs/,amqp/,runtime/,pipeline/,sinks/,app/,common/,sluice/aws/,sluice/sqs/,sluice/s3/,sluice/sns/,sluice/amqp/,sluice/cloudwatch/,sluice/ecs/"
  "src/sqs|amqp/,sns/,pipeline/,sinks/,app/,sluice/amqp/,sluice/sns/"
  "src/amqp|sqs/,s3/,sns/,aws/,pipeline/,sinks/,app/,sluice/sqs/,sluice/s3/,sluice/sns/,sluice/aws/"
  "src/sinks|aws/,sqs/,s3/,sns/,amqp/,app/,sluice/aws/,sluice/sqs/,sluice/s3/,sluice/sns/,sluice/amqp/"
  "include/sluice|sluice/aws/,sluice/sqs/,sluice/s3/,sluice/sns/,sluice/amqp/"
)

set(violations "")
foreach(rule IN LISTS rules)
  string(REPLACE "|" ";" parts "${rule}")
  list(GET parts 0 folder)
  list(GET parts 1 forbidden)
  string(REPLACE "," ";" forbidden "${forbidden}")
  # include/sluice: only the core's own headers, not the sources' subfolders.
  if(folder STREQUAL "include/sluice")
    file(GLOB files "${ROOT}/${folder}/*.hpp")
  else()
    file(GLOB_RECURSE files "${ROOT}/${folder}/*.hpp" "${ROOT}/${folder}/*.cpp")
  endif()
  foreach(file IN LISTS files)
    file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" header "${line}")
      foreach(prefix IN LISTS forbidden)
        string(FIND "${header}" "${prefix}" at)
        if(at EQUAL 0)
          file(RELATIVE_PATH shown "${ROOT}" "${file}")
          string(APPEND violations "  ${shown}: #include \"${header}\" (${folder} may not include ${prefix})\n")
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "layer check failed: a layer includes one above it or beside it\n${violations}")
endif()
