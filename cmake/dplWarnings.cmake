# Warnings for our own targets only; third-party headers come in as SYSTEM includes.
function(dpl_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
endfunction()
