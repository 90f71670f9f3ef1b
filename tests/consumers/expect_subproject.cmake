# handoff_expect_subproject(<handoff source dir>): fails the configure step unless handoff,
# added as a subproject, kept to its library: options off, no tests, benchmarks, examples or
# install rules added, and its targets only `handoff` and, when their Debian packages are found,
# `handoff_redis` (hiredis) and `handoff_prometheus` (prometheus-cpp).
function(handoff_expect_subproject dir)
  foreach(option HANDOFF_BUILD_TESTS HANDOFF_BUILD_BENCHMARKS HANDOFF_INSTALL)
    if(${option})
      message(FATAL_ERROR "${option} is ON in a subproject build: it must default to OFF")
    endif()
  endforeach()
  get_directory_property(subdirs DIRECTORY ${dir} SUBDIRECTORIES)
  get_directory_property(targets DIRECTORY ${dir} BUILDSYSTEM_TARGETS)
  set(extra ${targets})
  list(REMOVE_ITEM extra handoff handoff_redis handoff_prometheus)
  if(subdirs OR extra OR NOT "handoff" IN_LIST targets)
    message(FATAL_ERROR "handoff as a subproject added directories [${subdirs}] and targets [${targets}]; "
                        "expected no directories and the targets handoff (and handoff_redis, handoff_prometheus) only")
  endif()
  message(STATUS "handoff subproject: library only (no tests, benchmarks or install rules)")
endfunction()
