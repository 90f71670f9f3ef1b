# Installs the already-built handoff into a scratch prefix, configures and builds the
# consumer project in this directory against it, and runs the consumer.
#
#   cmake -DHANDOFF_BINARY_DIR=<handoff build dir> -DWORK_DIR=<scratch dir>
#         -DCXX_COMPILER=<compiler> [-DCONFIG=<config>] [-DSANITIZERS=<list>]
#         [-DGENERATOR=<generator>] -P run.cmake
cmake_minimum_required(VERSION 3.25)

foreach(var HANDOFF_BINARY_DIR WORK_DIR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run.cmake: ${var} is required")
  endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "install test: ${what}: ok")
endfunction()

set(config_args)
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()

run_step("install" "${CMAKE_COMMAND}" --install "${HANDOFF_BINARY_DIR}" --prefix "${prefix}" ${config_args})

set(configure_args
  -S "${CMAKE_CURRENT_LIST_DIR}" -B "${consumer_build}"
  "-DCMAKE_PREFIX_PATH=${prefix}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
if(GENERATOR)
  list(APPEND configure_args -G "${GENERATOR}")
endif()
if(CONFIG)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
endif()
if(SANITIZERS)
  # Same instrumentation as the library, so that the consumer links against it.
  list(APPEND configure_args
    "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZERS} -fno-omit-frame-pointer"
    "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZERS}")
endif()
run_step("configure consumer" "${CMAKE_COMMAND}" ${configure_args})
run_step("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" ${config_args})

# Single- and multi-config generators put the executable in different places.
find_program(consumer NAMES handoff_consumer PATHS "${consumer_build}" "${consumer_build}/${CONFIG}"
             NO_DEFAULT_PATH REQUIRED)
execute_process(COMMAND "${consumer}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message(STATUS "${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install test: the consumer failed (${rc})")
endif()
