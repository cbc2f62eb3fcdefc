# ctest driver for the package test: installs the posenc build tree into a fresh prefix, configures
# and builds test/consumer against it with find_package(posenc), and runs the result.
#
# Inputs: POSENC_BUILD_DIR, CONSUMER_SOURCE_DIR, WORK_DIR, TORCH_PREFIX, GENERATOR, PROGRAM (the
# executable the project builds; default: consumer), and optionally PREPARE (a command run first,
# in WORK_DIR, e.g. one that writes the program's input files), PROGRAM_ARGS (its arguments,
# relative paths resolved in WORK_DIR), PROGRAM_ARGS_AGAIN, PROGRAM_ARGS_THIRD and
# PROGRAM_ARGS_FOURTH (the arguments of further runs).
if(NOT PROGRAM)
  set(PROGRAM consumer)
endif()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "package test: ${what} failed (${status})\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok\n${out}")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run_step("install" ${CMAKE_COMMAND} --install "${POSENC_BUILD_DIR}" --prefix "${prefix}")
# Only the posenc prefix is given: posencConfig.cmake must find the LibTorch posenc was built with.
run_step("configure consumer" ${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/build"
  -G "${GENERATOR}" "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_BUILD_TYPE=Release)
run_step("build consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
if(PREPARE)
  execute_process(COMMAND ${PREPARE} WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE status
    OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "package test: prepare failed (${status})\n${out}\n${err}")
  endif()
endif()
execute_process(COMMAND "${WORK_DIR}/build/${PROGRAM}" ${PROGRAM_ARGS} WORKING_DIRECTORY "${WORK_DIR}"
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "package test: run ${PROGRAM} failed (${status})\n${out}\n${err}")
endif()
message(STATUS "run ${PROGRAM}: ok\n${out}")
foreach(run AGAIN THIRD FOURTH)
  if(PROGRAM_ARGS_${run})
    execute_process(COMMAND "${WORK_DIR}/build/${PROGRAM}" ${PROGRAM_ARGS_${run}}
      WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT status EQUAL 0)
      message(FATAL_ERROR "package test: run of ${PROGRAM} ${PROGRAM_ARGS_${run}} failed (${status})\n${out}\n${err}")
    endif()
    message(STATUS "run ${PROGRAM} ${PROGRAM_ARGS_${run}}: ok\n${out}")
  endif()
endforeach()
