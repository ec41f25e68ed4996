# minigpt_layer(NAME DIR DEPS ...): one static library per layer folder, built from every
# .cpp (and, with CUDA, .cu) file in DIR. Each folder owns its files; adding a source file is
# enough to build it (CONFIGURE_DEPENDS re-globs on the next build).
function(minigpt_layer name dir)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${dir}/*.cpp)
  if(MINIGPT_CUDA)
    file(GLOB cuda_sources CONFIGURE_DEPENDS ${dir}/*.cu)
    list(APPEND sources ${cuda_sources})
  endif()
  if(NOT sources)  # a layer whose sources are not written yet: headers only
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR}/src ${PROJECT_BINARY_DIR}/generated)
    target_link_libraries(${name} INTERFACE ${ARG_DEPS})
    return()
  endif()
  add_library(${name} STATIC ${sources})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_BINARY_DIR}/generated)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES LINKER_LANGUAGE CXX)
  minigpt_warnings(${name})
endfunction()
