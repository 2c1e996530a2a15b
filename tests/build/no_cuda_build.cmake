# cmake -DSOURCE_DIR=... -DBINARY_DIR=... -P no_cuda_build.cmake
# Configures with STRATA_CUDA=OFF and STRATA_MPI=OFF (the build without either
# optional dependency), builds every target, runs the CPU tests.
file(REMOVE_RECURSE ${BINARY_DIR})
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BINARY_DIR} -DSTRATA_CUDA=OFF -DSTRATA_MPI=OFF
          -DCMAKE_BUILD_TYPE=RelWithDebInfo
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configure with STRATA_CUDA=OFF STRATA_MPI=OFF failed:\n${out}\n${err}")
endif()
string(FIND "${out}" "Strata: CUDA backend OFF" found)
if(found EQUAL -1)
  message(FATAL_ERROR "STRATA_CUDA=OFF did not turn the CUDA backend off:\n${out}")
endif()
string(FIND "${out}" "Strata: MPI OFF" found)
if(found EQUAL -1)
  message(FATAL_ERROR "STRATA_MPI=OFF did not leave MPI out:\n${out}")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR} -j2
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  string(LENGTH "${out}" n)
  if(n GREATER 20000)
    math(EXPR from "${n} - 20000")
    string(SUBSTRING "${out}" ${from} 20000 out)
  endif()
  message(FATAL_ERROR "build of every target with STRATA_CUDA=OFF STRATA_MPI=OFF failed:\n${out}\n${err}")
endif()
execute_process(
  COMMAND ${CMAKE_CTEST_COMMAND} --output-on-failure -L cpu -j2
  WORKING_DIRECTORY ${BINARY_DIR}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "CPU tests of the build with STRATA_CUDA=OFF STRATA_MPI=OFF failed:\n${out}\n${err}")
endif()
string(REGEX MATCH "[0-9]+% tests passed[^\n]*" summary "${out}")
message(STATUS "STRATA_CUDA=OFF STRATA_MPI=OFF: every target built; CPU tests: ${summary}")
file(REMOVE_RECURSE ${BINARY_DIR})
