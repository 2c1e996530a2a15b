# cmake -DSOURCE_DIR=... -DBINARY_DIR=... -P no_cuda_build.cmake
file(REMOVE_RECURSE ${BINARY_DIR})
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BINARY_DIR} -DSTRATA_CUDA=OFF
          -DCMAKE_BUILD_TYPE=RelWithDebInfo
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configure with STRATA_CUDA=OFF failed:\n${out}\n${err}")
endif()
string(FIND "${out}" "Strata: CUDA backend OFF" found)
if(found EQUAL -1)
  message(FATAL_ERROR "STRATA_CUDA=OFF did not turn the CUDA backend off:\n${out}")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR} --target strata_kernels_cuda test_cuda_host -j2
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "build with STRATA_CUDA=OFF failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${BINARY_DIR}/tests/ops/test_cuda_host RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "test_cuda_host without CUDA failed:\n${out}\n${err}")
endif()
file(REMOVE_RECURSE ${BINARY_DIR})
