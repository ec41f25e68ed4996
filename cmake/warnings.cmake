# minigpt_warnings(target): the warning set every project target compiles with.
function(minigpt_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wno-unused-parameter $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall --expt-relaxed-constexpr>)
endfunction()
