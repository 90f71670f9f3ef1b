# Builds and runs tests/consumers/main.cpp against handoff consumed one way:
#   find_package      installs the already-built handoff into a scratch prefix; the project
#                     in find_package/ finds it with find_package(handoff), on a machine
#                     where the optional parts' dependencies (OpenSSL, hiredis,
#                     prometheus-cpp) cannot be found: any search for them fails. Then
#                     asks for the components built (WITH_REDIS, WITH_PROMETHEUS) and
#                     builds and runs redis_main.cpp and prometheus_main.cpp against them,
#                     and checks the failures: a component whose dependency is missing, and
#                     one that was not installed (its files removed from the prefix)
#   add_subdirectory  the project in add_subdirectory/, with handoff's source tree vendored
#   fetchcontent      the project in fetchcontent/, FetchContent from the source tree (no
#                     download); configured only: the build is add_subdirectory's
#   tsan              the project in tsan/, FetchContent from the source tree configured
#                     with -DHANDOFF_SANITIZERS=thread, the recipe for checking a program
#                     under ThreadSanitizer; built, and run with TSAN_OPTIONS=halt_on_error=1:
#                     any report fails it
#   pkgconfig         installs the already-built handoff into a scratch prefix and compiles
#                     main.cpp with the flags of `pkg-config --cflags --libs handoff`; with
#                     WITH_REDIS (WITH_PROMETHEUS) on, also redis_main.cpp with those of
#                     handoff-redis (prometheus_main.cpp, handoff-prometheus), and runs each
# Same compiler, generator, configuration and sanitizers as the handoff build that runs it;
# everything happens in WORK_DIR (wiped first).
#
#   cmake -DWAY=<way> -DHANDOFF_SOURCE_DIR=<source dir> -DWORK_DIR=<scratch dir>
#         -DCXX_COMPILER=<compiler> [-DCONFIG=<config>] [-DSANITIZERS=<list>]
#         [-DGENERATOR=<generator>]
#         [-DHANDOFF_BINARY_DIR=<handoff build dir>]  (find_package, pkgconfig)
#         [-DPKG_CONFIG=<pkg-config>]  (pkgconfig)
#         [-DWITH_REDIS=ON] [-DWITH_PROMETHEUS=ON]  (find_package, pkgconfig)
#         -P run.cmake
cmake_minimum_required(VERSION 3.25)

set(required WAY HANDOFF_SOURCE_DIR WORK_DIR CXX_COMPILER)
if(WAY STREQUAL "pkgconfig")
  list(APPEND required HANDOFF_BINARY_DIR PKG_CONFIG)
elseif(WAY STREQUAL "find_package")
  list(APPEND required HANDOFF_BINARY_DIR)
elseif(NOT WAY MATCHES "^(add_subdirectory|fetchcontent|tsan)$")
  message(FATAL_ERROR "run.cmake: WAY must be find_package, add_subdirectory, fetchcontent, tsan or pkgconfig, not '${WAY}'")
endif()
foreach(var IN LISTS required)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run.cmake: ${var} is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test (${WAY}): ${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "consumer test (${WAY}): ${what}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

# Like run_step, for a command that must fail with output matching `expected` (a regex).
function(fail_step what expected)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  # CMake wraps its messages' lines: match across the breaks.
  string(REGEX REPLACE "[ \t\r\n]+" " " flat "${out}")
  if(rc EQUAL 0 OR NOT flat MATCHES "${expected}")
    message(FATAL_ERROR "consumer test (${WAY}): ${what} should fail with '${expected}', "
                        "but exited with ${rc}:\n${out}")
  endif()
  message(STATUS "consumer test (${WAY}): ${what}: failed as it should")
endfunction()

set(config_args)
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
set(sanitizer_flags)
if(SANITIZERS)
  # Same instrumentation as the handoff build, so that the consumer links against it.
  set(sanitizer_flags -fsanitize=${SANITIZERS} -fno-omit-frame-pointer)
endif()

# The installed ways: into a scratch prefix of their own (tests may run in parallel).
set(prefix "${WORK_DIR}/prefix")
if(WAY MATCHES "^(find_package|pkgconfig)$")
  run_step("install" "${CMAKE_COMMAND}" --install "${HANDOFF_BINARY_DIR}" --prefix "${prefix}" ${config_args})
endif()

if(WAY STREQUAL "pkgconfig")
  # Only the scratch prefix: a handoff installed on the machine must not satisfy the test.
  file(GLOB pc_file "${prefix}/*/pkgconfig/handoff.pc" "${prefix}/*/*/pkgconfig/handoff.pc")
  if(NOT pc_file)
    message(FATAL_ERROR "consumer test (${WAY}): the install has no pkgconfig/handoff.pc")
  endif()
  get_filename_component(pc_dir "${pc_file}" DIRECTORY)
  # The scratch prefix first, then the system's .pc files (hiredis, libssl, prometheus-cpp),
  # where handoff itself is not.
  execute_process(COMMAND "${PKG_CONFIG}" --variable=pc_path pkg-config OUTPUT_VARIABLE system_pc_path
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  set(ENV{PKG_CONFIG_LIBDIR} "${pc_dir}:${system_pc_path}")
  # For a shared libhandoff (BUILD_SHARED_LIBS): the consumer has no rpath to it.
  execute_process(COMMAND "${PKG_CONFIG}" --variable=libdir handoff OUTPUT_VARIABLE libdir OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(ENV{LD_LIBRARY_PATH} "${libdir}")
  # Each package built, the program that uses it, and the executable.
  set(packages handoff main handoff_consumer)
  if(WITH_REDIS)
    list(APPEND packages handoff-redis redis_main handoff_redis_consumer)
  endif()
  if(WITH_PROMETHEUS)
    list(APPEND packages handoff-prometheus prometheus_main handoff_prometheus_consumer)
  endif()
  set(consumers)
  while(packages)
    list(POP_FRONT packages package source program)
    if(NOT EXISTS "${pc_dir}/${package}.pc")
      message(FATAL_ERROR "consumer test (${WAY}): the install has no pkgconfig/${package}.pc")
    endif()
    run_step("pkg-config --cflags --libs ${package}" "${PKG_CONFIG}" --cflags --libs ${package})
    string(STRIP "${step_output}" pc_flags)
    message(STATUS "consumer test (${WAY}): flags of ${package}: ${pc_flags}")
    separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
    # The standard is the user's to choose (the .pc files do not force one).
    run_step("compile and link ${source}.cpp"
      "${CXX_COMPILER}" -std=c++20 ${sanitizer_flags} "${CMAKE_CURRENT_LIST_DIR}/${source}.cpp" ${pc_flags}
      -o "${WORK_DIR}/${program}")
    list(APPEND consumers "${WORK_DIR}/${program}")
  endwhile()
else()
  set(consumer_build "${WORK_DIR}/build")
  # Everything but the build folder (-B), which comes with each configure.
  set(configure_args
    -S "${CMAKE_CURRENT_LIST_DIR}/${WAY}"
    "-DHANDOFF_SOURCE_DIR=${HANDOFF_SOURCE_DIR}"
    "-DCMAKE_PREFIX_PATH=${prefix}"
    "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
  if(GENERATOR)
    list(APPEND configure_args -G "${GENERATOR}")
  endif()
  if(CONFIG)
    list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
  endif()
  if(WAY STREQUAL "tsan")
    # The recipe under test: the option alone instruments handoff, and the project its own
    # target. No -fsanitize in CMAKE_CXX_FLAGS, which would cover handoff's sources too.
    list(APPEND configure_args -DHANDOFF_SANITIZERS=thread)
  elseif(SANITIZERS)
    # The same instrumentation as handoff (whose sources are compiled in the consumer's
    # build by add_subdirectory and FetchContent).
    list(JOIN sanitizer_flags " " flags)
    list(APPEND configure_args "-DCMAKE_CXX_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZERS}")
  endif()
  # One compile per core: a bare --parallel lets make start every compile at once (22
  # under TSan for the library alone).
  cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
  set(build_args --parallel ${cores} ${config_args})
  if(WAY STREQUAL "find_package")
    # A machine without the optional parts' dependencies: every find_* and find_package
    # looks only inside the scratch prefix (re-rooted there), and OpenSSL, prometheus-cpp
    # and hiredis are disabled by name as well. A config that still looked for any of them
    # fails this configure.
    set(bare_machine
      "-DCMAKE_FIND_ROOT_PATH=${prefix}"
      -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=ONLY
      -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY
      -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY
      -DCMAKE_DISABLE_FIND_PACKAGE_OpenSSL=ON
      -DCMAKE_DISABLE_FIND_PACKAGE_prometheus-cpp=ON
      -DCMAKE_DISABLE_FIND_PACKAGE_hiredis=ON)
    run_step("configure consumer without OpenSSL, hiredis and prometheus-cpp"
             "${CMAKE_COMMAND}" ${configure_args} -B "${consumer_build}" ${bare_machine})
  else()
    run_step("configure consumer" "${CMAKE_COMMAND}" ${configure_args} -B "${consumer_build}")
  endif()
  if(WAY STREQUAL "fetchcontent")
    # What is FetchContent's own (the declare, the make-available, the subproject's
    # defaults) is checked by the configure above; building the same sources as a
    # subproject is add_subdirectory's test, a minute of CI not spent twice.
    return()
  endif()
  # Only the consumer and what it links: the optional libraries (Redis, Prometheus) that
  # the subproject also defines would double the time and are not what this checks.
  run_step("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" --target handoff_consumer ${build_args})
  # Single- and multi-config generators put the executable in different places.
  find_program(consumers NAMES handoff_consumer PATHS "${consumer_build}" "${consumer_build}/${CONFIG}"
               NO_DEFAULT_PATH NO_CACHE REQUIRED)

  if(WAY STREQUAL "find_package")
    set(components)
    if(WITH_REDIS)
      list(APPEND components redis)
    endif()
    if(WITH_PROMETHEUS)
      list(APPEND components prometheus)
    endif()
    # A component asked for on that machine fails, naming the dependency it lacks (redis
    # looks for OpenSSL only when it is a static archive: a shared one links it itself).
    set(dependency_of_redis OpenSSL)
    set(dependency_of_prometheus prometheus-cpp)
    file(GLOB static_redis "${prefix}/*/libhandoff_redis.a" "${prefix}/*/*/libhandoff_redis.a")
    foreach(component IN LISTS components)
      if(component STREQUAL "redis" AND NOT static_redis)
        continue()
      endif()
      fail_step("COMPONENTS ${component} without ${dependency_of_${component}}"
        "component ${component} of handoff links ${dependency_of_${component}}, which was not found"
        "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/${WAY}" -B "${consumer_build}"
        "-DHANDOFF_COMPONENTS=${component}" -DHANDOFF_OPTIONAL_COMPONENTS=)
    endforeach()
    # The components built, on this machine: configured, built and run.
    if(components)
      set(components_build "${WORK_DIR}/build-components")
      # The list goes through a cache script: a ; on the command line would split it here.
      file(WRITE "${WORK_DIR}/components.cmake" "set(HANDOFF_COMPONENTS [[${components}]] CACHE STRING \"\")\n")
      run_step("configure consumer with COMPONENTS ${components}"
               "${CMAKE_COMMAND}" ${configure_args} -B "${components_build}" -C "${WORK_DIR}/components.cmake")
      list(TRANSFORM components PREPEND handoff_ OUTPUT_VARIABLE programs)
      list(TRANSFORM programs APPEND _consumer)
      run_step("build the components' consumers" "${CMAKE_COMMAND}" --build "${components_build}" --target ${programs}
               ${build_args})
      foreach(program IN LISTS programs)
        find_program(path NAMES ${program} PATHS "${components_build}" "${components_build}/${CONFIG}"
                     NO_DEFAULT_PATH NO_CACHE REQUIRED)
        list(APPEND consumers "${path}")
        unset(path)
      endforeach()
    endif()
    # A component that was not installed (prometheus, its files removed when it was):
    # required, it fails the configure with a message; optional, it is reported not found.
    file(GLOB prometheus_files "${prefix}/*/cmake/handoff/handoff-prometheus*.cmake"
                               "${prefix}/*/*/cmake/handoff/handoff-prometheus*.cmake")
    if(prometheus_files)
      file(REMOVE ${prometheus_files})
    endif()
    fail_step("COMPONENTS prometheus, not installed" "component 'prometheus' of handoff was not installed"
      "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/${WAY}" -B "${consumer_build}"
      -DHANDOFF_COMPONENTS=prometheus -DHANDOFF_OPTIONAL_COMPONENTS=)
    run_step("OPTIONAL_COMPONENTS prometheus, not installed"
      "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/${WAY}" -B "${consumer_build}"
      -DHANDOFF_COMPONENTS= -DHANDOFF_OPTIONAL_COMPONENTS=prometheus)
    if(NOT step_output MATCHES "handoff component prometheus: not found")
      message(FATAL_ERROR "consumer test (${WAY}): OPTIONAL_COMPONENTS prometheus, not installed, "
                          "was not reported not found:\n${step_output}")
    endif()
  endif()
endif()

if(WAY STREQUAL "tsan")
  # No suppressions (the program uses no thread_pool): any report stops it with exit code 66.
  set(ENV{TSAN_OPTIONS} "halt_on_error=1 exitcode=66")
endif()
foreach(consumer IN LISTS consumers)
  execute_process(COMMAND "${consumer}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message(STATUS "${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test (${WAY}): ${consumer} failed (${rc})")
  endif()
  if(out MATCHES "ThreadSanitizer")
    message(FATAL_ERROR "consumer test (${WAY}): ${consumer} exited with 0 but ThreadSanitizer reported")
  endif()
endforeach()
