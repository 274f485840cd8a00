# Script mode: writes OUT from the list FILES (see embed_kernels.cmake).
#
# A program's parts (kernels/PROGRAM/*.cl) are spliced in where the program
# says `#include "PROGRAM/PART.cl"` on a line of its own: the embedded text is
# what a preprocessor with kernels/ on its include path would see, so no driver
# has to resolve an include at run time (the binary carries no kernel files).
string(REPLACE "\"" "" FILES "${FILES}")
string(REPLACE "|" ";" FILES "${FILES}")

# Replaces each `#include "PART"` line of TEXT (in program FILE) by the text of
# kernels/PART, parts in parts included the same way; a missing part fails the build.
function(splice_parts file text_var)
  get_filename_component(dir ${file} DIRECTORY)
  set(text "\n${${text_var}}")
  foreach(depth RANGE 4)
    string(REGEX MATCHALL "\n#include \"[^\"\n]+\"" incs "${text}")
    if(NOT incs)
      string(SUBSTRING "${text}" 1 -1 text)
      set(${text_var} "${text}" PARENT_SCOPE)
      return()
    endif()
    foreach(inc IN LISTS incs)
      string(REGEX REPLACE "^\n#include \"([^\"\n]+)\"$" "\\1" part "${inc}")
      if(NOT EXISTS ${dir}/${part})
        message(FATAL_ERROR "${file}: #include \"${part}\": no such file in ${dir}")
      endif()
      string(FIND "${text}" "${inc}\n" at)
      if(at EQUAL -1)
        message(FATAL_ERROR "${file}: #include \"${part}\" must be alone on its line")
      endif()
      file(READ ${dir}/${part} part_text)
      string(REPLACE "${inc}\n" "\n${part_text}" text "${text}")
    endforeach()
  endforeach()
  message(FATAL_ERROR "${file}: parts included more than 4 levels deep")
endfunction()

set(body "// Generated from kernels/*.cl by cmake/embed_kernels_script.cmake. Do not edit.\n")
string(APPEND body "#include \"backend/opencl/kernel_sources.hpp\"\n\nnamespace nanscope::opencl {\n\n")
string(APPEND body "const std::vector<KernelSource>& kernel_sources() {\n  static const std::vector<KernelSource> sources = {\n")
foreach(f ${FILES})
  get_filename_component(name ${f} NAME_WE)
  file(READ ${f} text)
  splice_parts(${f} text)
  # Raw string literals have a length limit on some compilers; split in chunks.
  string(LENGTH "${text}" len)
  set(pieces "")
  set(pos 0)
  while(pos LESS len)
    string(SUBSTRING "${text}" ${pos} 12000 chunk)
    string(APPEND pieces "R\"NSK(${chunk})NSK\"\n")
    math(EXPR pos "${pos} + 12000")
  endwhile()
  string(APPEND body "    {\"${name}\", std::string(\n${pieces})},\n")
endforeach()
string(APPEND body "  };\n  return sources;\n}\n\n}  // namespace nanscope::opencl\n")
file(WRITE ${OUT}.tmp "${body}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
