# Writes build_info.h (version, compiler, build type, CUDA on/off, git revision) so that
# `minigpt info` and every benchmark table can say which build produced a figure.
find_package(Git QUIET)
set(MINIGPT_GIT_REV "unknown")
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short HEAD
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE MINIGPT_GIT_REV OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET)
  if(NOT MINIGPT_GIT_REV)
    set(MINIGPT_GIT_REV "unknown")
  endif()
endif()
if(MINIGPT_CUDA)
  set(MINIGPT_WITH_CUDA 1)
  set(MINIGPT_CUDA_VERSION "${CMAKE_CUDA_COMPILER_VERSION}")
  set(MINIGPT_CUDA_ARCHS "${CMAKE_CUDA_ARCHITECTURES}")
else()
  set(MINIGPT_WITH_CUDA 0)
  set(MINIGPT_CUDA_VERSION "")
  set(MINIGPT_CUDA_ARCHS "")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/build_info.h.in
               ${PROJECT_BINARY_DIR}/generated/minigpt/build_info.h @ONLY)
