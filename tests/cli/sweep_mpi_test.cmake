# Runs a sweep on one process and on two MPI ranks; the CSV files must be identical.
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${MESHWORK} sweep ${SWEEP} --csv ${OUT}/one.csv RESULT_VARIABLE rc1)
execute_process(COMMAND ${MPIEXEC} -np 2 --oversubscribe ${MESHWORK} sweep ${SWEEP} --csv ${OUT}/two.csv
                RESULT_VARIABLE rc2 OUTPUT_VARIABLE out2 ERROR_VARIABLE err2)
if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0)
  message(FATAL_ERROR "sweep failed: ${rc1} / ${rc2}\n${out2}\n${err2}")
endif()
file(READ ${OUT}/one.csv one)
file(READ ${OUT}/two.csv two)
if(NOT one STREQUAL two)
  message(FATAL_ERROR "the MPI sweep differs from the single-process one")
endif()
message(STATUS "MPI sweep: identical CSV from 1 and 2 ranks")
